//! A preallocated key/value cache for batched decoding: `[B, KV, capacity, D]` per layer,
//! written in place (`slice_set`), read as a narrowed view, so a decode step appends without
//! reallocating. Rows are left-padded: row `b`'s first `pad[b]` slots are padding.

use candle_core::{DType, Device, Result, Tensor};

/// The cache of one layer.
#[derive(Clone, Debug)]
pub struct LayerCache {
    k: Tensor,
    v: Tensor,
}

/// The cache of every layer plus the batch's padding and fill level.
#[derive(Clone, Debug)]
pub struct KvCache {
    layers: Vec<LayerCache>,
    pad: Vec<usize>,
    len: usize,
    capacity: usize,
}

impl KvCache {
    /// An empty cache for `batch` rows of `layers` layers.
    #[allow(clippy::too_many_arguments)]
    pub fn new(
        layers: usize,
        batch: usize,
        kv_heads: usize,
        head_dim: usize,
        capacity: usize,
        pad: Vec<usize>,
        dtype: DType,
        device: &Device,
    ) -> Result<Self> {
        let mut out = Vec::with_capacity(layers);
        for _ in 0..layers {
            out.push(LayerCache {
                k: Tensor::zeros((batch, kv_heads, capacity, head_dim), dtype, device)?,
                v: Tensor::zeros((batch, kv_heads, capacity, head_dim), dtype, device)?,
            });
        }
        Ok(Self {
            layers: out,
            pad,
            len: 0,
            capacity,
        })
    }

    /// Slots filled so far (padding included).
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether nothing was appended yet.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Slots available in total.
    pub fn capacity(&self) -> usize {
        self.capacity
    }

    /// Rows in the batch.
    pub fn batch(&self) -> usize {
        self.pad.len()
    }

    /// Leading padding slots of each row.
    pub fn pad(&self) -> &[usize] {
        &self.pad
    }

    /// Layers cached.
    pub fn layers(&self) -> usize {
        self.layers.len()
    }

    /// The whole key and value tensors of `layer` (`[B, KV, capacity, D]`; slots past
    /// [`len`](Self::len) are zero). Panics if `layer` is out of range.
    pub fn layer(&self, layer: usize) -> (&Tensor, &Tensor) {
        let c = &self.layers[layer];
        (&c.k, &c.v)
    }

    /// Writes `k`/`v` (`[B, KV, L, D]`) of `layer` at the current fill level and returns views
    /// of everything cached for that layer, including them. Call [`advance`](Self::advance)
    /// once all layers have appended.
    pub fn append(&mut self, layer: usize, k: &Tensor, v: &Tensor) -> Result<(Tensor, Tensor)> {
        let l = k.dim(2)?;
        if self.len + l > self.capacity {
            candle_core::bail!(
                "kv cache full: {} + {} slots exceed its capacity {}",
                self.len,
                l,
                self.capacity
            );
        }
        let c = &self.layers[layer];
        c.k.slice_set(&k.contiguous()?, 2, self.len)?;
        c.v.slice_set(&v.contiguous()?, 2, self.len)?;
        Ok((
            c.k.narrow(2, 0, self.len + l)?,
            c.v.narrow(2, 0, self.len + l)?,
        ))
    }

    /// Copies every slot of row `src_row` of `src` (a cache of the same layers and capacity)
    /// into row `row` of this one; the fill level is not moved.
    pub fn copy_row(&mut self, row: usize, src: &KvCache, src_row: usize) -> Result<()> {
        if src.layers.len() != self.layers.len()
            || src.capacity != self.capacity
            || row >= self.batch()
            || src_row >= src.batch()
            || src.pad[src_row] != self.pad[row]
        {
            candle_core::bail!("kv cache row {row}: row {src_row} of the other cache does not fit");
        }
        for (c, p) in self.layers.iter().zip(&src.layers) {
            c.k.slice_set(&p.k.narrow(0, src_row, 1)?, 0, row)?;
            c.v.slice_set(&p.v.narrow(0, src_row, 1)?, 0, row)?;
        }
        Ok(())
    }

    /// Keys and values of every layer at slots `from..from + len` of `row`, copied out
    /// (`[KV, len, D]` each; later writes to the cache do not reach them).
    pub fn row_slots(&self, row: usize, from: usize, len: usize) -> Result<Vec<(Tensor, Tensor)>> {
        if row >= self.batch() || from + len > self.capacity {
            candle_core::bail!(
                "kv cache: slots {from}..{} of row {row} are outside [{}, {}]",
                from + len,
                self.batch(),
                self.capacity
            );
        }
        let take = |t: &Tensor| -> Result<Tensor> {
            t.narrow(0, row, 1)?
                .narrow(2, from, len)?
                .squeeze(0)?
                .force_contiguous()
        };
        self.layers
            .iter()
            .map(|c| Ok((take(&c.k)?, take(&c.v)?)))
            .collect()
    }

    /// Writes `slots` (one `[KV, len, D]` key and value pair per layer, as
    /// [`row_slots`](Self::row_slots) returns them) into `row` from slot `at`; the fill level is
    /// not moved.
    pub fn set_row_slots(
        &mut self,
        row: usize,
        at: usize,
        slots: &[(Tensor, Tensor)],
    ) -> Result<()> {
        if slots.len() != self.layers.len() || row >= self.batch() {
            candle_core::bail!(
                "kv cache row {row}: {} layers of slots for a cache of {} layers and {} rows",
                slots.len(),
                self.layers.len(),
                self.batch()
            );
        }
        for (c, (k, v)) in self.layers.iter().zip(slots) {
            c.k.narrow(0, row, 1)?.slice_set(&k.unsqueeze(0)?, 2, at)?;
            c.v.narrow(0, row, 1)?.slice_set(&v.unsqueeze(0)?, 2, at)?;
        }
        Ok(())
    }

    /// Marks `l` more slots as filled (after every layer appended them).
    pub fn advance(&mut self, l: usize) {
        self.len += l;
    }

    /// Keeps only the given rows (in that order), e.g. to drop finished sequences.
    pub fn retain(&mut self, rows: &[usize]) -> Result<()> {
        if rows.len() == self.pad.len() && rows.iter().enumerate().all(|(i, &r)| i == r) {
            return Ok(());
        }
        let device = self.layers[0].k.device().clone();
        let idx = Tensor::from_vec(
            rows.iter().map(|&r| r as u32).collect::<Vec<_>>(),
            rows.len(),
            &device,
        )?;
        for c in &mut self.layers {
            c.k = c.k.index_select(&idx, 0)?;
            c.v = c.v.index_select(&idx, 0)?;
        }
        self.pad = rows.iter().map(|&r| self.pad[r]).collect();
        Ok(())
    }
}
