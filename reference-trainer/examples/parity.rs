//! Our side of the transformers parity check (`python/tests/gguf_parity.py`): loads a GGUF file
//! as the trainer does (`train --init FILE.gguf`) and writes what the script compares with
//! transformers' `from_pretrained(dir, gguf_file=...)`:
//!
//! ```text
//! cargo run -p reference-trainer --example gguf_parity -- encode FILE.gguf TEXTS.json IDS.json
//! cargo run -p reference-trainer --example gguf_parity -- logits FILE.gguf IDS.json OUT.bin
//! ```
//!
//! `encode`: `TEXTS.json` is a list of strings; `IDS.json` receives their token ids (no special
//! tokens added). `logits`: `IDS.json` is a list of lists of token ids; `OUT.bin` receives,
//! sequence after sequence, the `[len, vocab]` logits of every position as little-endian f32.

use std::path::PathBuf;

use anyhow::{bail, Context, Result};
use candle_core::{DType, Device};
use reference_trainer::gguf;

fn read_json<T: serde::de::DeserializeOwned>(path: &str) -> Result<T> {
    let text = std::fs::read_to_string(path).with_context(|| path.to_string())?;
    serde_json::from_str(&text).with_context(|| path.to_string())
}

fn main() -> Result<()> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let [mode, file, input, out] = args.as_slice() else {
        bail!("usage: gguf_parity encode|logits FILE.gguf IN.json OUT");
    };
    let (file, out) = (PathBuf::from(file), PathBuf::from(out));
    match mode.as_str() {
        "encode" => {
            let tok = gguf::read(&file)?.tokenizer;
            let texts: Vec<String> = read_json(input)?;
            let ids = texts
                .iter()
                .map(|t| tok.encode(t))
                .collect::<Result<Vec<_>, _>>()?;
            std::fs::write(&out, serde_json::to_string(&ids)?)
                .with_context(|| out.display().to_string())?;
        }
        "logits" => {
            let (model, _) = gguf::load(&file, DType::F32, &Device::Cpu)?;
            let seqs: Vec<Vec<u32>> = read_json(input)?;
            let mut bytes = Vec::new();
            for s in &seqs {
                let logits = model.forward_logits(std::slice::from_ref(s))?;
                for x in logits.flatten_all()?.to_vec1::<f32>()? {
                    bytes.extend_from_slice(&x.to_le_bytes());
                }
            }
            std::fs::write(&out, bytes).with_context(|| out.display().to_string())?;
        }
        other => bail!("{other:?}: the mode is `encode` or `logits`"),
    }
    Ok(())
}
