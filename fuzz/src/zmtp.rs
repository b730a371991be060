//! An engine's bytes as the subscriber reads them (ZMTP 3.0: a greeting, then frames), cut into
//! reads at arbitrary points: the greeting is taken or refused, then whole messages come out until
//! the bytes run out or an error names what is wrong. Whatever the cuts, the greeting's verdict,
//! the messages and the error are those of the bytes read at once; every message has a frame,
//! and no frame is longer than `MAX_FRAME`.

use libroute_subscriber::zmtp::{Frames, MAX_FRAME, Message};

/// What a stream of bytes gives: the greeting's verdict, the messages, the error that stopped
/// them (if one did), and the bytes left waiting for more.
#[derive(Debug, PartialEq)]
struct Outcome {
    greeted: Result<bool, String>,
    messages: Vec<Message>,
    error: Option<String>,
    left: usize,
}

fn read(stream: &[u8], cuts: &mut dyn Iterator<Item = usize>) -> Outcome {
    let mut frames = Frames::default();
    let mut outcome = Outcome { greeted: Ok(false), messages: Vec::new(), error: None, left: 0 };
    let mut rest = stream;
    while !rest.is_empty() {
        let (piece, after) = rest.split_at(cuts.next().unwrap_or(rest.len()).clamp(1, rest.len()));
        rest = after;
        frames.push(piece);
        if outcome.greeted == Ok(false) {
            outcome.greeted = frames.take_greeting().map_err(|e| e.to_string());
        }
        if outcome.greeted != Ok(true) {
            if outcome.greeted.is_err() {
                break;
            }
            continue;
        }
        loop {
            match frames.take_message() {
                Ok(Some(message)) => {
                    assert!(!message.frames.is_empty(), "a message without frames");
                    assert!(message.frames.iter().all(|f| f.len() as u64 <= MAX_FRAME));
                    outcome.messages.push(message);
                }
                Ok(None) => break,
                Err(e) => {
                    outcome.error = Some(e.to_string());
                    break;
                }
            }
        }
        if outcome.error.is_some() {
            break;
        }
    }
    outcome.left = frames.buffered();
    assert!(outcome.left <= stream.len());
    outcome
}

/// Runs one input: its first byte seeds the cuts, the rest is the stream.
pub fn run(data: &[u8]) {
    let Some((&seed, stream)) = data.split_first() else { return };
    let whole = read(stream, &mut std::iter::empty());
    let mut state = u32::from(seed) | 1;
    let mut cuts = std::iter::from_fn(|| {
        // xorshift: read sizes of 1 to 64 bytes.
        state ^= state << 13;
        state ^= state >> 17;
        state ^= state << 5;
        Some(1 + (state % 64) as usize)
    });
    let cut = read(stream, &mut cuts);
    // An error stops the cut reading early, with bytes after it unread: compare what both saw.
    if whole.error.is_some() || cut.error.is_some() || whole.greeted.is_err() {
        assert_eq!((&whole.greeted, &whole.messages, &whole.error), (&cut.greeted, &cut.messages, &cut.error));
    } else {
        assert_eq!(whole, cut);
    }
}
