//! One `KVEventBatch` payload, checked whole by [`KvBatch::parse`] and then read event by event
//! in place.

use super::msgpack::Reader;
use super::{WireError, WireProblem};
use crate::host::hashing::BlockHasher;
use crate::host::index::Tier;

/// A checked `KVEventBatch` payload: its header, and its events read in place by
/// [`KvBatch::events`].
///
/// # The payload
///
/// A batch is `[ts, events, data_parallel_rank?]` (msgspec's `array_like` structs: earlier vLLM
/// and SGLang) or the same fields as a map (`{"ts": .., "events": [..], ..}`, later vLLM;
/// SGLang names the rank `attn_dp_rank`). Each event is tagged with its class name, first in the
/// array form or under `"type"` in the map form:
///
/// | event | fields read (array positions after the tag) | fields skipped |
/// | --- | --- | --- |
/// | `BlockStored` | `block_hashes`, `parent_block_hash`, `token_ids`, `block_size`, `lora_id`, `medium`, `lora_name` | `extra_keys`, `group_idx`, any later field |
/// | `BlockRemoved` | `block_hashes`, `medium` | `group_idx`, any later field |
/// | `AllBlocksCleared` | | any |
///
/// Trailing optional fields may be absent (msgspec's `omit_defaults`). An engine's block hash is
/// an integer (read as its 64-bit two's complement pattern) or bytes (read as their xxh3-64);
/// `medium` `GPU` (or absent) is the device tier, `CPU` or `CPU_PINNED` the host tier, `DISK`,
/// `EXTERNAL` and `REMOTE` the disk tier, compared without case; any other medium is an error.
/// A stored event's `token_ids` must hold exactly `block_size` tokens per block hash.
///
/// Anything else (a truncated payload, a value of the wrong type, an unknown event, trailing
/// bytes) is a [`WireError`] naming the byte offset, and a payload that fails changes nothing
/// ([`KvIngest`](super::KvIngest) checks it whole before applying it).
///
/// # Examples
///
/// ```
/// use libroute_core::{KvBatch, Tier, WireEvent};
///
/// // [ts, [["BlockStored", [11, 12], None, [1, 2, 3, 4], 2, None, "GPU"]], 0], as msgspec writes it.
/// let payload = [
///     0x93, 0xcb, 0x3f, 0xf0, 0, 0, 0, 0, 0, 0, // 3 fields, ts = 1.0
///     0x91, 0x97, 0xab, b'B', b'l', b'o', b'c', b'k', b'S', b't', b'o', b'r', b'e', b'd',
///     0x92, 11, 12, 0xc0, 0x94, 1, 2, 3, 4, 2, 0xc0, 0xa3, b'G', b'P', b'U',
///     0x00, // data_parallel_rank 0
/// ];
/// let batch = KvBatch::parse(&payload).unwrap();
/// assert_eq!(batch.ts(), 1.0);
/// assert_eq!(batch.data_parallel_rank(), Some(0));
/// let Some(WireEvent::Stored(stored)) = batch.events().next() else { panic!() };
/// assert_eq!(stored.hashes().collect::<Vec<_>>(), [11, 12]);
/// assert_eq!(stored.tier(), Tier::Device);
/// assert_eq!(stored.block_size(), 2);
///
/// let err = KvBatch::parse(&payload[..20]).unwrap_err();
/// assert_eq!(err.to_string(), "KV event payload, byte 20: the payload ends inside a value");
/// ```
#[derive(Debug, Clone, Copy)]
pub struct KvBatch<'a> {
    payload: &'a [u8],
    ts: f64,
    rank: Option<u32>,
    events_at: usize,
    events: usize,
    /// Where the token list of each of the first [`REMEMBERED`] events ends (0: not a stored
    /// event), so reading the events again jumps over their token ids instead of walking them.
    token_ends: [usize; REMEMBERED],
    /// Where the local hashes of each of the first [`REMEMBERED`] events start in the buffer of
    /// a [`Prehash`] (`usize::MAX`: not computed).
    locals_at: [usize; REMEMBERED],
    /// The first stored event's block size and its offset, and the first that differs from it.
    block_sizes: [Option<(u32, usize)>; 2],
}

/// Events whose token list's end [`KvBatch::parse`] remembers.
const REMEMBERED: usize = 16;

/// One event of a batch.
#[derive(Debug, Clone, Copy)]
pub enum WireEvent<'a> {
    /// `BlockStored`: the engine stored blocks.
    Stored(StoredBlocks<'a>),
    /// `BlockRemoved`: the engine removed blocks.
    Removed(RemovedBlocks<'a>),
    /// `AllBlocksCleared`: the engine dropped its whole cache.
    Cleared,
}

/// The LoRA adapter a stored event names.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Lora<'a> {
    /// None: the base model.
    Base,
    /// `lora_name`, the adapter's name.
    Name(&'a [u8]),
    /// Only `lora_id` (engines before `lora_name` existed).
    Id(u64),
}

impl Lora<'_> {
    /// The seed of the stored blocks' local hashes (see [`crate::BlockHasher::local_seed`]): the
    /// name salts it; an event with only `lora_id` is salted with the id's decimal digits, so a
    /// host hashes such an adapter's requests with the digits as its name.
    #[must_use]
    pub fn seed(&self) -> u64 {
        match *self {
            Lora::Base => BlockHasher::local_seed(None),
            Lora::Name(name) => BlockHasher::local_seed(Some(name)),
            Lora::Id(id) => {
                let mut digits = [0u8; 20];
                let mut at = digits.len();
                let mut n = id;
                loop {
                    at -= 1;
                    #[allow(clippy::cast_possible_truncation, reason = "a digit")]
                    let digit = (n % 10) as u8;
                    digits[at] = b'0' + digit;
                    n /= 10;
                    if n == 0 {
                        break;
                    }
                }
                BlockHasher::local_seed(Some(&digits[at..]))
            }
        }
    }
}

/// A `BlockStored` event, read in place.
#[derive(Debug, Clone, Copy)]
pub struct StoredBlocks<'a> {
    hashes: List<'a>,
    parent: Option<u64>,
    tokens: List<'a>,
    block_size: u32,
    block_size_at: usize,
    tokens_end: usize,
    locals_at: Option<usize>,
    lora: Lora<'a>,
    tier: Tier,
}

impl<'a> StoredBlocks<'a> {
    /// The engine's hashes of the stored blocks, in order.
    pub fn hashes(&self) -> impl Iterator<Item = u64> + 'a {
        self.hashes.hashes()
    }

    /// How many blocks were stored.
    #[must_use]
    pub const fn block_count(&self) -> usize {
        self.hashes.len
    }

    /// The engine's hash of the block before the first stored one (`None`: they start a
    /// sequence).
    #[must_use]
    pub const fn parent(&self) -> Option<u64> {
        self.parent
    }

    /// The stored blocks' token ids, `block_size` per block.
    pub fn tokens(&self) -> impl Iterator<Item = u32> + 'a {
        self.tokens.tokens()
    }

    /// Tokens per block.
    #[must_use]
    pub const fn block_size(&self) -> u32 {
        self.block_size
    }

    /// Where this event's local hashes (base seed) start in the [`Prehash`] buffer the batch was
    /// checked with, if they were computed then.
    pub(crate) const fn locals_at(&self) -> Option<usize> {
        self.locals_at
    }

    /// The LoRA adapter.
    #[must_use]
    pub const fn lora(&self) -> Lora<'a> {
        self.lora
    }

    /// Where the blocks were stored.
    #[must_use]
    pub const fn tier(&self) -> Tier {
        self.tier
    }
}

/// A `BlockRemoved` event, read in place.
#[derive(Debug, Clone, Copy)]
pub struct RemovedBlocks<'a> {
    hashes: List<'a>,
    tier: Tier,
}

impl<'a> RemovedBlocks<'a> {
    /// The engine's hashes of the removed blocks.
    pub fn hashes(&self) -> impl Iterator<Item = u64> + 'a {
        self.hashes.hashes()
    }

    /// How many blocks were removed.
    #[must_use]
    pub const fn block_count(&self) -> usize {
        self.hashes.len
    }

    /// Where they were removed from.
    #[must_use]
    pub const fn tier(&self) -> Tier {
        self.tier
    }
}

/// A checked array of integers (token ids) or block hashes, read again in place.
#[derive(Debug, Clone, Copy)]
struct List<'a> {
    payload: &'a [u8],
    at: usize,
    len: usize,
}

impl<'a> List<'a> {
    /// Reads an array header and checks every element with `element`.
    fn read(
        r: &mut Reader<'a>,
        payload: &'a [u8],
        mut element: impl FnMut(&mut Reader<'a>) -> Result<(), WireError>,
    ) -> Result<Self, WireError> {
        let len = r.array()?;
        let at = r.pos();
        for _ in 0..len {
            element(r)?;
        }
        Ok(Self { payload, at, len })
    }

    fn hashes(self) -> impl Iterator<Item = u64> + 'a {
        let mut r = Reader::at(self.payload, self.at);
        // Checked by `parse`, so reading cannot fail; `map_while` ends early if it ever did.
        (0..self.len).map_while(move |_| r.hash().ok())
    }

    fn tokens(self) -> impl Iterator<Item = u32> + 'a {
        let mut r = Reader::at(self.payload, self.at);
        (0..self.len).map_while(move |_| r.u32().ok())
    }
}

/// Local hashes computed while a payload is checked, so its token ids are walked once: for each
/// stored event whose token count is a multiple of the block size, each block's local hash with
/// the base model's seed (an event that names a LoRA adapter is hashed again with its seed).
#[derive(Debug)]
pub(crate) struct Prehash<'b> {
    hasher: BlockHasher,
    locals: &'b mut [u64],
    filled: usize,
}

impl<'b> Prehash<'b> {
    /// Hashes blocks of `block_size` (not zero) tokens into `locals`, as far as they go.
    pub(crate) fn new(block_size: u32, locals: &'b mut [u64]) -> Self {
        Self {
            hasher: BlockHasher::with_seed(block_size, BlockHasher::local_seed(None)),
            locals,
            filled: 0,
        }
    }

    /// Checks the `len` token ids at `r` and, when they are whole blocks that fit, hashes them;
    /// returns where their hashes start.
    fn take(&mut self, r: &mut Reader<'_>, len: usize) -> Result<Option<usize>, WireError> {
        let size = self.hasher.block_size() as usize;
        let blocks = len / size;
        if len == 0 || len % size != 0 || self.filled + blocks > self.locals.len() {
            r.skip_u32s(len)?;
            return Ok(None);
        }
        let start = self.filled;
        for _ in 0..blocks {
            let local = self
                .hasher
                .local_hash_with(size, |bytes| r.u32s_le(bytes))?;
            self.locals[self.filled] = local;
            self.filled += 1;
        }
        Ok(Some(start))
    }
}

/// How an event is read.
enum Pass<'p, 'b> {
    /// The first time: every value checked, and, with a [`Prehash`], stored blocks hashed.
    Check(Option<&'p mut Prehash<'b>>),
    /// Again after a check: the token list ends at the offset remembered, if any.
    Again(Option<usize>),
}

/// The fields libroute reads.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Field {
    BlockHashes,
    ParentBlockHash,
    TokenIds,
    BlockSize,
    LoraId,
    Medium,
    LoraName,
}

impl Field {
    /// The field's name in the map form.
    fn name(self) -> &'static [u8] {
        match self {
            Field::BlockHashes => b"block_hashes",
            Field::ParentBlockHash => b"parent_block_hash",
            Field::TokenIds => b"token_ids",
            Field::BlockSize => b"block_size",
            Field::LoraId => b"lora_id",
            Field::Medium => b"medium",
            Field::LoraName => b"lora_name",
        }
    }
}

/// The fields of each event; the array form lists them in this order after the tag.
const STORED_FIELDS: [Field; 7] = [
    Field::BlockHashes,
    Field::ParentBlockHash,
    Field::TokenIds,
    Field::BlockSize,
    Field::LoraId,
    Field::Medium,
    Field::LoraName,
];
const REMOVED_FIELDS: [Field; 2] = [Field::BlockHashes, Field::Medium];

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    Stored,
    Removed,
    Cleared,
}

impl Kind {
    fn of(tag: &[u8]) -> Option<Self> {
        match tag {
            b"BlockStored" => Some(Kind::Stored),
            b"BlockRemoved" => Some(Kind::Removed),
            b"AllBlocksCleared" => Some(Kind::Cleared),
            _ => None,
        }
    }

    fn fields(self) -> &'static [Field] {
        match self {
            Kind::Stored => &STORED_FIELDS,
            Kind::Removed => &REMOVED_FIELDS,
            Kind::Cleared => &[],
        }
    }
}

/// An event's fields as read, before the required ones are checked present.
#[derive(Debug, Default)]
struct Fields<'a> {
    hashes: Option<List<'a>>,
    /// `parent_block_hash` read (`Some`), and its value (`None` for nil).
    #[allow(
        clippy::option_option,
        reason = "absent and nil differ: absent is an error"
    )]
    parent: Option<Option<u64>>,
    tokens: Option<(List<'a>, usize)>,
    tokens_end: usize,
    locals_at: Option<usize>,
    block_size: Option<(u32, usize)>,
    lora_id: Option<u64>,
    lora_name: Option<&'a [u8]>,
    tier: Option<Tier>,
}

impl<'a> Fields<'a> {
    /// Reads the value of field `index` of `kind`'s list.
    /// Reads the value of field `index` of `kind`'s list.
    fn read(
        &mut self,
        kind: Kind,
        index: usize,
        r: &mut Reader<'a>,
        payload: &'a [u8],
        pass: &mut Pass<'_, '_>,
    ) -> Result<(), WireError> {
        match kind.fields()[index] {
            Field::BlockHashes => {
                self.hashes = Some(List::read(r, payload, Reader::skip_hash)?);
            }
            Field::ParentBlockHash => {
                self.parent = Some(if r.nil()? { None } else { Some(r.hash()?) });
            }
            Field::TokenIds => {
                let at = r.pos();
                let len = r.array()?;
                let list = List {
                    payload,
                    at: r.pos(),
                    len,
                };
                match pass {
                    Pass::Again(Some(end)) => *r = Reader::at(payload, *end),
                    Pass::Check(Some(prehash)) => self.locals_at = prehash.take(r, len)?,
                    Pass::Again(None) | Pass::Check(None) => r.skip_u32s(len)?,
                }
                self.tokens = Some((list, at));
                self.tokens_end = r.pos();
            }
            Field::BlockSize => {
                let at = r.pos();
                let size = narrow(r.uint(u64::from(u32::MAX))?);
                if size == 0 {
                    return Err(WireError {
                        offset: at,
                        problem: WireProblem::ZeroBlockSize,
                    });
                }
                self.block_size = Some((size, at));
            }
            Field::LoraId => {
                self.lora_id = if r.nil()? {
                    None
                } else {
                    Some(r.uint(u64::MAX)?)
                };
            }
            Field::LoraName => {
                self.lora_name = if r.nil()? { None } else { Some(r.str()?) };
            }
            Field::Medium => {
                let at = r.pos();
                self.tier = if r.nil()? {
                    None
                } else {
                    Some(tier_of(r.str()?).ok_or(WireError {
                        offset: at,
                        problem: WireProblem::UnknownMedium,
                    })?)
                };
            }
        }
        Ok(())
    }

    fn event(self, kind: Kind, at: usize) -> Result<WireEvent<'a>, WireError> {
        let missing = |field| WireError {
            offset: at,
            problem: WireProblem::MissingField { field },
        };
        let tier = self.tier.unwrap_or(Tier::Device);
        match kind {
            Kind::Cleared => Ok(WireEvent::Cleared),
            Kind::Removed => Ok(WireEvent::Removed(RemovedBlocks {
                hashes: self.hashes.ok_or(missing("block_hashes"))?,
                tier,
            })),
            Kind::Stored => {
                let hashes = self.hashes.ok_or(missing("block_hashes"))?;
                let parent = self.parent.ok_or(missing("parent_block_hash"))?;
                let (tokens, tokens_at) = self.tokens.ok_or(missing("token_ids"))?;
                let (block_size, block_size_at) = self.block_size.ok_or(missing("block_size"))?;
                if hashes.len.checked_mul(block_size as usize) != Some(tokens.len) {
                    return Err(WireError {
                        offset: tokens_at,
                        problem: WireProblem::TokenCount {
                            tokens: tokens.len,
                            blocks: hashes.len,
                            block_size,
                        },
                    });
                }
                let lora = match (self.lora_name, self.lora_id) {
                    (Some(name), _) if !name.is_empty() => Lora::Name(name),
                    (_, Some(id)) => Lora::Id(id),
                    _ => Lora::Base,
                };
                Ok(WireEvent::Stored(StoredBlocks {
                    hashes,
                    parent,
                    tokens,
                    block_size,
                    block_size_at,
                    tokens_end: self.tokens_end,
                    locals_at: self.locals_at,
                    lora,
                    tier,
                }))
            }
        }
    }
}

#[allow(clippy::cast_possible_truncation, reason = "read with max u32::MAX")]
const fn narrow(v: u64) -> u32 {
    v as u32
}

/// The tier of an engine's `medium`, compared without case.
fn tier_of(medium: &[u8]) -> Option<Tier> {
    let is = |name: &[u8]| medium.eq_ignore_ascii_case(name);
    if is(b"GPU") {
        Some(Tier::Device)
    } else if is(b"CPU") || is(b"CPU_PINNED") {
        Some(Tier::Host)
    } else if is(b"DISK") || is(b"EXTERNAL") || is(b"REMOTE") {
        Some(Tier::Disk)
    } else {
        None
    }
}

/// Reads one event (either form) at `r`.
fn read_event<'a>(
    r: &mut Reader<'a>,
    payload: &'a [u8],
    mut pass: Pass<'_, '_>,
) -> Result<WireEvent<'a>, WireError> {
    let at = r.pos();
    let mut fields = Fields::default();
    let kind;
    if r.is_array()? {
        let n = r.array()?;
        if n == 0 {
            return Err(WireError {
                offset: at,
                problem: WireProblem::MissingField { field: "type" },
            });
        }
        let tag_at = r.pos();
        kind = Kind::of(r.str()?).ok_or(WireError {
            offset: tag_at,
            problem: WireProblem::UnknownEvent,
        })?;
        for index in 0..n - 1 {
            if index < kind.fields().len() {
                fields.read(kind, index, r, payload, &mut pass)?;
            } else {
                r.skip()?;
            }
        }
    } else {
        // The map form: fields by name, in any order; the tag under "type".
        let n = r.map()?;
        let start = *r;
        // The tag first, wherever it is, so each field is read by its event's schema.
        let mut found = None;
        for _ in 0..n {
            let key = r.str()?;
            if key == b"type" {
                let tag_at = r.pos();
                found = Some(Kind::of(r.str()?).ok_or(WireError {
                    offset: tag_at,
                    problem: WireProblem::UnknownEvent,
                })?);
            } else {
                r.skip()?;
            }
        }
        kind = found.ok_or(WireError {
            offset: at,
            problem: WireProblem::MissingField { field: "type" },
        })?;
        let end = *r;
        *r = start;
        for _ in 0..n {
            let key = r.str()?;
            match kind.fields().iter().position(|f| f.name() == key) {
                Some(index) => fields.read(kind, index, r, payload, &mut pass)?,
                None => r.skip()?,
            }
        }
        *r = end;
    }
    fields.event(kind, at)
}

impl<'a> KvBatch<'a> {
    /// Reads and checks a whole payload: every event, every field it reads, every block hash
    /// and token id.
    ///
    /// # Errors
    ///
    /// A [`WireError`] naming the byte offset of the first thing wrong.
    pub fn parse(payload: &'a [u8]) -> Result<Self, WireError> {
        Self::parse_with(payload, None)
    }

    /// [`KvBatch::parse`], computing the stored blocks' local hashes into `prehash` as it checks
    /// their token ids.
    pub(crate) fn parse_with(
        payload: &'a [u8],
        mut prehash: Option<&mut Prehash<'_>>,
    ) -> Result<Self, WireError> {
        let mut r = Reader::new(payload);
        let mut ts = None;
        let mut rank = None;
        let mut events = None;
        let mut block_sizes = [None; 2];
        let mut token_ends = [0; REMEMBERED];
        let mut locals_at = [usize::MAX; REMEMBERED];
        let mut read_events = |r: &mut Reader<'a>| -> Result<(usize, usize), WireError> {
            let n = r.array()?;
            let at = r.pos();
            for i in 0..n {
                let pass = Pass::Check(prehash.as_deref_mut());
                if let WireEvent::Stored(s) = read_event(r, payload, pass)? {
                    if let Some(end) = token_ends.get_mut(i) {
                        *end = s.tokens_end;
                    }
                    if let (Some(slot), Some(start)) = (locals_at.get_mut(i), s.locals_at) {
                        *slot = start;
                    }
                    let this = Some((s.block_size, s.block_size_at));
                    match block_sizes {
                        [None, _] => block_sizes[0] = this,
                        [Some((first, _)), None] if first != s.block_size => block_sizes[1] = this,
                        _ => {}
                    }
                }
            }
            Ok((at, n))
        };
        let rank_of = |r: &mut Reader<'a>| -> Result<Option<u32>, WireError> {
            Ok(if r.nil()? {
                None
            } else {
                Some(narrow(r.uint(u64::from(u32::MAX))?))
            })
        };
        let missing = |field| WireError {
            offset: 0,
            problem: WireProblem::MissingField { field },
        };
        if r.is_array()? {
            let n = r.array()?;
            if n < 2 {
                return Err(missing(if n == 0 { "ts" } else { "events" }));
            }
            ts = Some(r.float()?);
            events = Some(read_events(&mut r)?);
            if n > 2 {
                rank = rank_of(&mut r)?;
            }
            for _ in 3..n {
                r.skip()?;
            }
        } else {
            let n = r.map()?;
            for _ in 0..n {
                match r.str()? {
                    b"ts" => ts = Some(r.float()?),
                    b"events" => events = Some(read_events(&mut r)?),
                    b"data_parallel_rank" | b"attn_dp_rank" => rank = rank_of(&mut r)?,
                    _ => r.skip()?,
                }
            }
        }
        if !r.is_done() {
            return Err(WireError {
                offset: r.pos(),
                problem: WireProblem::TrailingBytes,
            });
        }
        let ts = ts.ok_or(missing("ts"))?;
        let (events_at, events) = events.ok_or(missing("events"))?;
        Ok(Self {
            payload,
            ts,
            rank,
            events_at,
            events,
            token_ends,
            locals_at,
            block_sizes,
        })
    }

    /// The batch's timestamp (seconds, as the engine wrote it).
    #[must_use]
    pub const fn ts(&self) -> f64 {
        self.ts
    }

    /// The data-parallel rank the engine named (`data_parallel_rank`, or SGLang's
    /// `attn_dp_rank`), if any.
    #[must_use]
    pub const fn data_parallel_rank(&self) -> Option<u32> {
        self.rank
    }

    /// How many events the batch holds.
    #[must_use]
    pub const fn len(&self) -> usize {
        self.events
    }

    /// Whether the batch holds no event.
    #[must_use]
    pub const fn is_empty(&self) -> bool {
        self.events == 0
    }

    /// Whether any event is a `BlockStored`.
    #[must_use]
    pub const fn has_stores(&self) -> bool {
        self.block_sizes[0].is_some()
    }

    /// The first stored event whose block size is not `expected`: its block size and the byte
    /// offset of that field.
    #[must_use]
    pub fn block_size_other_than(&self, expected: u32) -> Option<(u32, usize)> {
        match self.block_sizes {
            [Some((first, at)), _] if first != expected => Some((first, at)),
            [_, other] => other,
        }
    }

    /// The events, in order, read in place.
    #[must_use]
    pub fn events(&self) -> Events<'a> {
        Events {
            r: Reader::at(self.payload, self.events_at),
            payload: self.payload,
            token_ends: self.token_ends,
            locals_at: self.locals_at,
            next: 0,
            left: self.events,
        }
    }
}

/// The events of a [`KvBatch`], in order.
#[derive(Debug, Clone)]
pub struct Events<'a> {
    r: Reader<'a>,
    payload: &'a [u8],
    token_ends: [usize; REMEMBERED],
    locals_at: [usize; REMEMBERED],
    next: usize,
    left: usize,
}

impl<'a> Iterator for Events<'a> {
    type Item = WireEvent<'a>;

    fn next(&mut self) -> Option<WireEvent<'a>> {
        if self.left == 0 {
            return None;
        }
        self.left -= 1;
        // Checked by `parse`: reading again cannot fail, and an impossible failure ends the
        // iteration rather than panicking.
        let tokens_end = self
            .token_ends
            .get(self.next)
            .copied()
            .filter(|&end| end != 0);
        let locals_at = self
            .locals_at
            .get(self.next)
            .copied()
            .filter(|&at| at != usize::MAX);
        self.next += 1;
        let mut event = read_event(&mut self.r, self.payload, Pass::Again(tokens_end)).ok();
        if let Some(WireEvent::Stored(s)) = event.as_mut() {
            s.locals_at = locals_at;
        }
        if event.is_none() {
            self.left = 0;
        }
        event
    }

    fn size_hint(&self) -> (usize, Option<usize>) {
        (0, Some(self.left))
    }
}
