//! A bench's results: `(measure, value)` rows printed as a markdown table, or as one JSON object
//! with `--json` (what `speed_vs_torch.py` reads).

pub fn print_rows(rows: &[(String, f64)], header: &str, json: bool) {
    if json {
        let obj: serde_json::Map<String, serde_json::Value> = rows
            .iter()
            .map(|(k, v)| (k.clone(), serde_json::json!(v)))
            .collect();
        println!("{}", serde_json::Value::Object(obj));
    } else {
        println!("| {header} | value |\n|---|---|");
        for (k, v) in rows {
            println!("| {k} | {v:.1} |");
        }
    }
}
