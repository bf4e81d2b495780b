//! Hugging Face checkpoints: `config.json` + `model.safetensors` (or shards listed in
//! `model.safetensors.index.json`), read and written in the layout `transformers` uses, so a
//! model saved here loads as the class its `config.json` names (`Qwen3ForCausalLM`,
//! `LlamaForCausalLM`, `Qwen2ForCausalLM`) and a real checkpoint of those families loads here.
//! Every file is written to a temporary name and renamed, so a crash never leaves half a file.

use std::collections::{BTreeMap, HashMap};
use std::fs;
use std::path::{Path, PathBuf};

use candle_core::{DType, Device, Tensor};

use super::qwen3::{Qwen3, Qwen3Config};
use crate::error::{Error, Result};

/// The weights file of an unsharded checkpoint.
pub const WEIGHTS: &str = "model.safetensors";
/// The shard index of a sharded checkpoint.
pub const INDEX: &str = "model.safetensors.index.json";
/// The model config.
pub const CONFIG: &str = "config.json";

/// Reads `dir/config.json`.
pub fn load_config(dir: &Path) -> Result<Qwen3Config> {
    let path = dir.join(CONFIG);
    let text = fs::read_to_string(&path).map_err(|e| Error::io(&path, e))?;
    Qwen3Config::from_json(&text, &path)
}

/// Reads every tensor of the checkpoint in `dir` (unsharded or sharded), on the CPU.
pub fn load_weights(dir: &Path) -> Result<HashMap<String, Tensor>> {
    let single = dir.join(WEIGHTS);
    let index = dir.join(INDEX);
    // `save` writes shards, then the index, then removes a single file (and removes the index
    // before writing a single file): when both are present the index is the newer one.
    if single.is_file() && !index.is_file() {
        return read_safetensors(&single);
    }
    if !index.is_file() {
        return Err(Error::Checkpoint {
            path: dir.into(),
            tensor: "*".into(),
            message: format!("neither {WEIGHTS} nor {INDEX} is in this folder"),
        });
    }
    let text = fs::read_to_string(&index).map_err(|e| Error::io(&index, e))?;
    let parsed: serde_json::Value = serde_json::from_str(&text).map_err(|e| Error::Json {
        path: index.clone(),
        message: e.to_string(),
    })?;
    let map = parsed
        .get("weight_map")
        .and_then(|m| m.as_object())
        .ok_or_else(|| Error::Json {
            path: index.clone(),
            message: "no `weight_map` object".into(),
        })?;
    let mut shards: BTreeMap<String, Vec<String>> = BTreeMap::new();
    for (name, file) in map {
        let file = file.as_str().ok_or_else(|| Error::Json {
            path: index.clone(),
            message: format!("weight_map[{name:?}] is not a file name"),
        })?;
        if file.contains('/') || file.contains('\\') || file.starts_with('.') {
            return Err(Error::Json {
                path: index.clone(),
                message: format!("weight_map[{name:?}] = {file:?} is not a file in this folder"),
            });
        }
        shards
            .entry(file.to_string())
            .or_default()
            .push(name.clone());
    }
    let mut out = HashMap::new();
    for (file, names) in shards {
        let path = dir.join(&file);
        let mut tensors = read_safetensors(&path)?;
        for name in names {
            let t = tensors.remove(&name).ok_or_else(|| Error::Checkpoint {
                path: path.clone(),
                tensor: name.clone(),
                message: format!("listed in {INDEX} but not in this shard"),
            })?;
            out.insert(name, t);
        }
    }
    Ok(out)
}

/// Reads every tensor of one safetensors file, on the CPU.
pub fn read_safetensors(path: &Path) -> Result<HashMap<String, Tensor>> {
    let bytes = fs::read(path).map_err(|e| Error::io(path, e))?;
    candle_core::safetensors::load_buffer(&bytes, &Device::Cpu).map_err(|e| Error::Checkpoint {
        path: path.into(),
        tensor: "*".into(),
        message: format!("not a readable safetensors file: {e}"),
    })
}

/// Loads the checkpoint in `dir` as a model computing in `dtype` on `device` (bf16/f16
/// checkpoints are converted).
pub fn load(dir: &Path, dtype: DType, device: &Device) -> Result<Qwen3> {
    let cfg = load_config(dir)?;
    let weights = load_weights(dir)?;
    Qwen3::from_weights(cfg, weights, dtype, device, dir)
}

/// Writes `config.json` and the weights into `dir` (created if missing), in shards of at most
/// `max_shard_bytes` with an index when the weights are larger than that.
pub fn save(model: &Qwen3, dir: &Path, max_shard_bytes: usize) -> Result<()> {
    fs::create_dir_all(dir).map_err(|e| Error::io(dir, e))?;
    let mut cfg = model.config().clone();
    let dtype_name = match model.dtype() {
        DType::BF16 => "bfloat16",
        DType::F16 => "float16",
        DType::F64 => "float64",
        _ => "float32",
    };
    cfg.extra
        .insert("torch_dtype".into(), serde_json::json!(dtype_name));
    let cfg_text = serde_json::to_string_pretty(&cfg).expect("a config serialises");
    write_atomic(&dir.join(CONFIG), cfg_text.as_bytes())?;

    // Tensors in name order, grouped into shards by size.
    let mut shards: Vec<Vec<(&str, &Tensor)>> = vec![Vec::new()];
    let mut size = 0usize;
    let mut total = 0usize;
    for (name, var) in model.params() {
        let bytes = var.elem_count() * var.dtype().size_in_bytes();
        if size > 0 && size + bytes > max_shard_bytes {
            shards.push(Vec::new());
            size = 0;
        }
        size += bytes;
        total += bytes;
        shards
            .last_mut()
            .expect("one shard")
            .push((name, var.as_tensor()));
    }
    if shards.len() == 1 {
        remove_if_present(&dir.join(INDEX))?;
        return write_shard(&dir.join(WEIGHTS), &shards[0]);
    }
    let n = shards.len();
    let mut weight_map = BTreeMap::new();
    for (i, shard) in shards.iter().enumerate() {
        let file = format!("model-{:05}-of-{:05}.safetensors", i + 1, n);
        write_shard(&dir.join(&file), shard)?;
        for (name, _) in shard {
            weight_map.insert(name.to_string(), file.clone());
        }
    }
    let index = serde_json::json!({
        "metadata": { "total_size": total },
        "weight_map": weight_map,
    });
    write_atomic(
        &dir.join(INDEX),
        serde_json::to_string_pretty(&index)
            .expect("json")
            .as_bytes(),
    )?;
    remove_if_present(&dir.join(WEIGHTS))
}

fn remove_if_present(path: &Path) -> Result<()> {
    match fs::remove_file(path) {
        Ok(()) => Ok(()),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
        Err(e) => Err(Error::io(path, e)),
    }
}

/// Writes named tensors to one safetensors file (atomically), e.g. an optimizer's state.
pub fn write_safetensors(path: &Path, tensors: &[(&str, &Tensor)]) -> Result<()> {
    write_shard(path, tensors)
}

fn write_shard(path: &Path, tensors: &[(&str, &Tensor)]) -> Result<()> {
    let mut data = Vec::with_capacity(tensors.len());
    for (name, t) in tensors {
        let (dtype, bytes) = tensor_bytes(t)?;
        data.push((name.to_string(), dtype, t.dims().to_vec(), bytes));
    }
    let views: Vec<(String, safetensors::tensor::TensorView<'_>)> = data
        .iter()
        .map(|(name, dtype, shape, bytes)| {
            let view = safetensors::tensor::TensorView::new(*dtype, shape.clone(), bytes)
                .expect("shape and byte count agree by construction");
            (name.clone(), view)
        })
        .collect();
    // `transformers` checks this metadata key before it loads a safetensors file.
    let metadata = HashMap::from([("format".to_string(), "pt".to_string())]);
    let bytes = safetensors::serialize(views, Some(metadata)).map_err(|e| Error::Checkpoint {
        path: path.into(),
        tensor: "*".into(),
        message: format!("could not serialise: {e}"),
    })?;
    write_atomic(path, &bytes)
}

fn tensor_bytes(t: &Tensor) -> Result<(safetensors::Dtype, Vec<u8>)> {
    let flat = t.flatten_all()?;
    Ok(match t.dtype() {
        DType::F32 => (
            safetensors::Dtype::F32,
            flat.to_vec1::<f32>()?
                .iter()
                .flat_map(|x| x.to_le_bytes())
                .collect(),
        ),
        DType::F64 => (
            safetensors::Dtype::F64,
            flat.to_vec1::<f64>()?
                .iter()
                .flat_map(|x| x.to_le_bytes())
                .collect(),
        ),
        DType::BF16 => (
            safetensors::Dtype::BF16,
            flat.to_vec1::<half::bf16>()?
                .iter()
                .flat_map(|x| x.to_le_bytes())
                .collect(),
        ),
        DType::F16 => (
            safetensors::Dtype::F16,
            flat.to_vec1::<half::f16>()?
                .iter()
                .flat_map(|x| x.to_le_bytes())
                .collect(),
        ),
        other => {
            return Err(Error::invalid(
                "dtype",
                format!("{other:?} weights cannot be saved (f32, f64, bf16, f16 only)"),
            ))
        }
    })
}

/// Writes `bytes` to `path` through a temporary file in the same folder and a rename, so
/// readers see the old file or the new one, never a half-written one. The temporary name is
/// unique per call (process id and a counter), so threads writing the same file at once (two
/// arms of a parallel `ablate` storing one evaluation) each rename a whole file of their own.
pub fn write_atomic(path: &Path, bytes: &[u8]) -> Result<()> {
    static NEXT: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    let dir = path.parent().unwrap_or(Path::new("."));
    let name = path
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    let n = NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let tmp: PathBuf = dir.join(format!(".{name}.tmp-{}-{n}", std::process::id()));
    let result = (|| {
        use std::io::Write;
        let mut f = fs::File::create(&tmp)?;
        f.write_all(bytes)?;
        f.sync_all()?;
        fs::rename(&tmp, path)
    })();
    result.map_err(|e| {
        let _ = fs::remove_file(&tmp);
        Error::io(path, e)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn threads_writing_one_file_at_once_each_land_a_whole_file() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("same.json");
        let texts: Vec<String> = (0..8).map(|t| format!("{t}").repeat(4096)).collect();
        std::thread::scope(|s| {
            for text in &texts {
                let path = &path;
                s.spawn(move || {
                    for _ in 0..50 {
                        write_atomic(path, text.as_bytes()).unwrap();
                    }
                });
            }
        });
        let back = fs::read_to_string(&path).unwrap();
        assert!(texts.contains(&back), "a mixed file");
        let left: Vec<_> = fs::read_dir(dir.path()).unwrap().collect();
        assert_eq!(left.len(), 1, "temporary files left behind");
    }
}
