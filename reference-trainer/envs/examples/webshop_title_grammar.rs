//! Prints the WebShop generator's title grammar as JSON, the input of
//! `tools/webshop_title_nouns.py` (which tags every title it spans with spaCy).
//!
//! ```text
//! cargo run -q -p t2po-envs --example webshop_title_grammar > grammar.json
//! ```

fn main() {
    println!("{}", t2po_envs::webshop::generate::title_grammar());
}
