//! Block hashes against NVIDIA Dynamo's: the vectors in `../shared/data/dynamo_block_hashes.jsonl`
//! (made with Dynamo's own `compute_block_hash_for_seq` and `compute_seq_hash_for_block`), and
//! the definition written out byte by byte for what the vectors do not cover (blocks longer than
//! one hashing chunk, hashing a prompt in pieces).

use libroute_core::{BlockHasher, HashError};
use xxhash_rust::xxh3::xxh3_64_with_seed;

const VECTORS: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/../../shared/data/dynamo_block_hashes.jsonl"
);

fn u64s(value: &serde_json::Value) -> Vec<u64> {
    value
        .as_array()
        .expect("an array")
        .iter()
        .map(|v| v.as_u64().expect("a u64"))
        .collect()
}

#[test]
#[allow(clippy::print_stderr, reason = "says why the vectors were not checked")]
fn dynamo_vectors() {
    let Ok(text) = std::fs::read_to_string(VECTORS) else {
        eprintln!("skipped: {VECTORS} is absent");
        return;
    };
    let mut checked = 0;
    for line in text.lines().filter(|l| !l.trim().is_empty()) {
        let v: serde_json::Value = serde_json::from_str(line).unwrap();
        let id = v["id"].as_u64().unwrap();
        let block_size = u32::try_from(v["block_size"].as_u64().unwrap()).unwrap();
        let lora = v["lora_name"].as_str().map(str::as_bytes);
        let tokens: Vec<u32> = u64s(&v["tokens"])
            .into_iter()
            .map(|t| u32::try_from(t).unwrap())
            .collect();
        let hasher = BlockHasher::new(block_size, lora).unwrap();
        let mut local = vec![0; tokens.len()];
        let n = hasher.local_hashes(&tokens, &mut local).unwrap();
        assert_eq!(
            local[..n],
            u64s(&v["local_block_hashes"]),
            "vector {id}: local"
        );
        let mut sequence = vec![0; n];
        assert_eq!(hasher.sequence_hashes(&tokens, None, &mut sequence), Ok(n));
        assert_eq!(
            sequence,
            u64s(&v["sequence_hashes"]),
            "vector {id}: sequence"
        );
        checked += 1;
    }
    assert!(checked >= 100, "only {checked} vectors");
}

/// The definition, written out: tokens as little-endian bytes, one xxh3-64 call per block.
fn by_definition(tokens: &[u32], block_size: usize, lora: Option<&str>) -> Vec<u64> {
    let seed = match lora {
        Some(name) if !name.is_empty() => {
            1337u64.wrapping_add(xxh3_64_with_seed(name.as_bytes(), 0))
        }
        _ => 1337,
    };
    let mut out = Vec::new();
    let mut parent: Option<u64> = None;
    for block in tokens.chunks_exact(block_size) {
        let bytes: Vec<u8> = block.iter().flat_map(|t| t.to_le_bytes()).collect();
        let local = xxh3_64_with_seed(&bytes, seed);
        let hash = match parent {
            None => local,
            Some(p) => {
                let mut pair = p.to_le_bytes().to_vec();
                pair.extend_from_slice(&local.to_le_bytes());
                xxh3_64_with_seed(&pair, 1337)
            }
        };
        out.push(hash);
        parent = Some(hash);
    }
    out
}

#[test]
fn long_blocks_stream_to_the_same_hash() {
    // 256 tokens fill one hashing chunk exactly; longer blocks are streamed.
    let tokens: Vec<u32> = (0..3000u32)
        .map(|i| i.wrapping_mul(2_654_435_761))
        .collect();
    for block_size in [255, 256, 257, 300, 1000, 1500] {
        for lora in [None, Some("adapter-7"), Some("")] {
            let hasher = BlockHasher::new(block_size, lora.map(str::as_bytes)).unwrap();
            let mut out = vec![0; 16];
            let n = hasher.sequence_hashes(&tokens, None, &mut out).unwrap();
            assert_eq!(
                out[..n],
                by_definition(&tokens, block_size as usize, lora)[..]
            );
        }
    }
}

#[test]
fn every_block_size_up_to_two_chunks_hashes_as_defined() {
    // The hasher's buffer follows the block: 64 bytes up to 16 tokens, 256 up to 64, a chunk up
    // to 256, a stream beyond; every size on both sides of each edge, each hashed by the local
    // and the sequence hashes, with a partial block after the whole ones.
    let tokens: Vec<u32> = (0..2000u32)
        .map(|i| i.wrapping_mul(2_246_822_519) ^ (i >> 3))
        .collect();
    for block_size in 1..=520u32 {
        let size = block_size as usize;
        let prompt = &tokens[..(3 * size + size / 2).min(tokens.len())];
        let hasher = BlockHasher::new(block_size, Some(b"adapter-3")).unwrap();
        let want = by_definition(prompt, size, Some("adapter-3"));
        let mut sequence = vec![0; want.len()];
        assert_eq!(
            hasher.sequence_hashes(prompt, None, &mut sequence),
            Ok(want.len()),
            "block size {block_size}"
        );
        assert_eq!(sequence, want, "block size {block_size}");
        let seed = BlockHasher::local_seed(Some(b"adapter-3"));
        let local_of = |block: &[u32]| {
            let bytes: Vec<u8> = block.iter().flat_map(|t| t.to_le_bytes()).collect();
            xxh3_64_with_seed(&bytes, seed)
        };
        let mut local = vec![0; want.len()];
        assert_eq!(hasher.local_hashes(prompt, &mut local), Ok(want.len()));
        for (k, block) in prompt.chunks_exact(size).enumerate() {
            assert_eq!(local[k], local_of(block), "block size {block_size}: local");
        }
        // A partial block hashes as its own tokens (the local hash of any length).
        let tail = &prompt[size * want.len()..];
        assert_eq!(
            hasher.local_hash(tail),
            local_of(tail),
            "block size {block_size}: the partial block"
        );
    }
}

#[test]
fn a_prompt_hashes_the_same_in_pieces() {
    let tokens: Vec<u32> = (0..200u32).collect();
    let hasher = BlockHasher::new(16, Some(b"x")).unwrap();
    let mut whole = [0u64; 12];
    assert_eq!(hasher.sequence_hashes(&tokens, None, &mut whole), Ok(12));
    let mut first = [0u64; 5];
    let mut rest = [0u64; 7];
    assert_eq!(
        hasher.sequence_hashes(&tokens[..80], None, &mut first),
        Ok(5)
    );
    assert_eq!(
        hasher.sequence_hashes(&tokens[80..], Some(first[4]), &mut rest),
        Ok(7)
    );
    assert_eq!(whole[..5], first);
    assert_eq!(whole[5..], rest);
}

#[test]
fn bad_arguments_are_errors() {
    assert_eq!(BlockHasher::new(0, None), Err(HashError::ZeroBlockSize));
    let hasher = BlockHasher::new(4, None).unwrap();
    let mut out = [7u64; 2];
    assert_eq!(
        hasher.sequence_hashes(&[1; 12], None, &mut out),
        Err(HashError::OutputTooShort {
            blocks: 3,
            capacity: 2
        })
    );
    assert_eq!(out, [7, 7], "nothing written");
    assert_eq!(
        HashError::OutputTooShort {
            blocks: 3,
            capacity: 2
        }
        .to_string(),
        "the prompt has 3 complete blocks but the output holds 2 hashes"
    );
    // A partial block is not hashed; no block at all is zero hashes.
    assert_eq!(hasher.sequence_hashes(&[1, 2, 3], None, &mut out), Ok(0));
}
