//! Shared pieces of the fuzz targets: configs built from arbitrary words (valid and invalid).

use arbitrary::Arbitrary;
use t2po_control::Config;

/// A base profile plus arbitrary overwrites of raw fields (integers and float bit patterns),
/// so the fuzzer reaches both valid configs and every validation error.
#[derive(Arbitrary, Debug, Clone)]
pub struct RawConfig {
    pub released: bool,
    pub small_vocab: bool,
    pub edits: Vec<(u8, u32)>,
}

impl RawConfig {
    pub fn build(&self) -> Config {
        let mut c = if self.released {
            Config::released()
        } else {
            Config::paper()
        };
        if self.small_vocab {
            // Token ids that fit the small rows the targets generate.
            c.think_open = 3;
            c.think_close = 4;
            c.queue[0] = 4;
            for (i, q) in c.queue.iter_mut().enumerate().skip(1) {
                *q = 5 + i as u32;
            }
        }
        for &(field, v) in self.edits.iter().take(8) {
            let f = f32::from_bits(v);
            match field % 27 {
                0 => c.top_j = v % 80,
                1 => c.alpha = f,
                2 => c.entropy_norm = v % 4,
                3 => c.entropy_term = v % 4,
                4 => c.confidence_norm = v % 4,
                5 => c.confidence_term = v % 4,
                6 => c.range_eps = f,
                7 => c.tti_enabled = v % 3,
                8 => c.trigger = v % 3,
                9 => c.window = v % 40,
                10 => c.epsilon = f,
                11 => c.patience = v % 40,
                12 => c.patience_tol = f,
                13 => c.min_len = v % 600,
                14 => c.max_think = v % 600,
                15 => c.think_open = v % 16,
                16 => c.think_close = v % 16,
                17 => c.queue_len = v % 10,
                18 => c.queue[(v % 8) as usize] = v >> 3,
                19 => c.tds_enabled = v % 3,
                20 => c.turn_mean = v % 3,
                21 => c.phi_floor = f,
                22 => c.phi_skip = v % 64,
                23 => c.tds_rule = v % 3,
                24 => c.eta = f,
                25 => c.max_resamples = v % 5,
                _ => c.keep = v % 3,
            }
        }
        c
    }
}

/// Reads little-endian f32 values from bytes.
pub fn f32s(bytes: &[u8]) -> Vec<f32> {
    bytes
        .chunks_exact(4)
        .map(|b| f32::from_le_bytes([b[0], b[1], b[2], b[3]]))
        .collect()
}

/// Reads little-endian u16 values (bf16/f16 bits) from bytes.
pub fn u16s(bytes: &[u8]) -> Vec<u16> {
    bytes
        .chunks_exact(2)
        .map(|b| u16::from_le_bytes([b[0], b[1]]))
        .collect()
}
