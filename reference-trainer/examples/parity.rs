//! Our side of the transformers parity checks (`python/tests/gguf_parity.py` for a GGUF file,
//! `tests/interop.py` for Hugging Face folders): loads a model as the trainer does (`train
//! --init MODEL`, `eval --checkpoint MODEL`) and writes what the scripts compare with
//! transformers:
//!
//! ```text
//! cargo run -p reference-trainer --example parity -- encode MODEL TEXTS.json IDS.json
//! cargo run -p reference-trainer --example parity -- logits MODEL IDS.json OUT.bin
//! cargo run -p reference-trainer --example parity -- default SEED OUT_DIR
//! ```
//!
//! `MODEL` is a GGUF file or a Hugging Face folder (config.json, safetensors, tokenizer.json).
//! `encode`: `TEXTS.json` is a list of strings; `IDS.json` receives their token ids (no special
//! tokens added). `logits`: `IDS.json` is a list of lists of token ids; `OUT.bin` receives,
//! sequence after sequence, the `[len, vocab]` logits of every position as little-endian f32.
//! `default`: writes the embedded default model and tokenizer of `SEED` as a checkpoint folder,
//! with the writers the trainer's checkpoints use.

use std::path::{Path, PathBuf};

use anyhow::{bail, Context, Result};
use candle_core::{DType, Device};
use reference_trainer::model::{checkpoint, Qwen3};
use reference_trainer::tokenizer::Tokenizer;
use reference_trainer::{defaults, gguf};

fn read_json<T: serde::de::DeserializeOwned>(path: &str) -> Result<T> {
    let text = std::fs::read_to_string(path).with_context(|| path.to_string())?;
    serde_json::from_str(&text).with_context(|| path.to_string())
}

fn tokenizer(model: &Path) -> Result<Tokenizer> {
    Ok(if gguf::is_gguf(model) {
        gguf::read(model)?.tokenizer
    } else {
        Tokenizer::load(model)?
    })
}

fn model(model: &Path) -> Result<Qwen3> {
    Ok(if gguf::is_gguf(model) {
        gguf::load(model, DType::F32, &Device::Cpu)?.0
    } else {
        checkpoint::load(model, DType::F32, &Device::Cpu)?
    })
}

fn main() -> Result<()> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let [mode, file, input, out] = args.as_slice() else {
        if let [mode, seed, out] = args.as_slice() {
            if mode == "default" {
                let seed: u64 = seed.parse().with_context(|| format!("seed {seed:?}"))?;
                let tok = defaults::tokenizer(seed)?;
                let model = defaults::model(&tok, seed, &Device::Cpu)?;
                let out = PathBuf::from(out);
                checkpoint::save(&model, &out, usize::MAX)?;
                tok.save(&out)?;
                return Ok(());
            }
        }
        bail!("usage: parity encode|logits MODEL IN.json OUT, or parity default SEED OUT_DIR");
    };
    let (file, out) = (PathBuf::from(file), PathBuf::from(out));
    match mode.as_str() {
        "encode" => {
            let tok = tokenizer(&file)?;
            let texts: Vec<String> = read_json(input)?;
            let ids = texts
                .iter()
                .map(|t| tok.encode(t))
                .collect::<Result<Vec<_>, _>>()?;
            std::fs::write(&out, serde_json::to_string(&ids)?)
                .with_context(|| out.display().to_string())?;
        }
        "logits" => {
            let model = model(&file)?;
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
        other => bail!("{other:?}: the mode is `encode`, `logits` or `default`"),
    }
    Ok(())
}
