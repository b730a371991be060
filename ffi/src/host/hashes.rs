//! Block hashes of a prompt's tokens, for hosts that route by token ids.

use libroute_core::{BlockHasher, HashError};

use crate::status::{Failure, libroute_status};

/// Writes the chained block hashes of `tokens` (blocks of `block_size`, salted by the LoRA
/// adapter's name `lora`, empty for the base model) to `out`; returns how many.
///
/// # Errors
///
/// `INVALID_ARGUMENT` (a block size of 0), with 0 hashes needed; `BUFFER_TOO_SMALL` with the
/// number of hashes `out` must hold.
pub fn block_hashes(
    tokens: &[u32],
    block_size: u32,
    lora: &[u8],
    out: &mut [u64],
) -> Result<usize, (usize, Failure)> {
    let hasher = BlockHasher::new(block_size, Some(lora))
        .map_err(|e| (0, Failure::new(libroute_status::InvalidArgument, e)))?;
    hasher
        .sequence_hashes(tokens, None, out)
        .map_err(|e| match e {
            HashError::OutputTooShort { blocks, .. } => {
                (blocks, Failure::new(libroute_status::BufferTooSmall, e))
            }
            _ => (0, Failure::new(libroute_status::InvalidArgument, e)),
        })
}
