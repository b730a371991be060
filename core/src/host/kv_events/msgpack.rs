//! The part of MessagePack the engines' KV events use, read in place: a cursor over the payload
//! that reads one value of an expected type or skips any value, and fails with the byte offset.
//! Nothing is copied or allocated; skipping is a loop over a count of values still to skip, so
//! deeply nested input cannot exhaust the stack.

use super::{WireError, WireProblem};

/// A cursor over a MessagePack payload.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Reader<'a> {
    buf: &'a [u8],
    pos: usize,
}

/// The kinds of value [`Reader::unexpected`] names when another one is found.
type Expected = &'static str;

/// Bytes of an unsigned integer up to `u32::MAX` as msgpack writes it (smallest form), marker
/// included, by its marker: 1 for a positive fixint, `None` for another marker. Token ids are
/// most of a payload, in every width at random, and each id's width is where the next one
/// starts: the width is computed from the marker's low bits (0xcc, 0xcd, 0xce: 2, 3, 5) rather
/// than read from a table, a second load on that chain.
#[inline]
const fn u32_width(marker: u8) -> Option<u32> {
    if marker < 0x80 {
        Some(1)
    } else if marker.wrapping_sub(0xcc) < 3 {
        Some(1 + (1 << (marker & 3)))
    } else {
        None
    }
}

impl<'a> Reader<'a> {
    pub(crate) const fn new(buf: &'a [u8]) -> Self {
        Self { buf, pos: 0 }
    }

    /// A cursor at `pos` of `buf`.
    pub(crate) const fn at(buf: &'a [u8], pos: usize) -> Self {
        Self { buf, pos }
    }

    /// The offset of the next value.
    pub(crate) const fn pos(&self) -> usize {
        self.pos
    }

    pub(crate) const fn is_done(&self) -> bool {
        self.pos >= self.buf.len()
    }

    const fn error(at: usize, problem: WireProblem) -> WireError {
        WireError {
            offset: at,
            problem,
        }
    }

    fn truncated(&self) -> WireError {
        Self::error(self.buf.len(), WireProblem::Truncated)
    }

    #[inline]
    fn peek(&self) -> Result<u8, WireError> {
        self.buf
            .get(self.pos)
            .copied()
            .ok_or_else(|| self.truncated())
    }

    fn byte(&mut self) -> Result<u8, WireError> {
        let b = self.peek()?;
        self.pos += 1;
        Ok(b)
    }

    fn take(&mut self, n: usize) -> Result<&'a [u8], WireError> {
        let end = self
            .pos
            .checked_add(n)
            .filter(|&end| end <= self.buf.len())
            .ok_or_else(|| self.truncated())?;
        let bytes = &self.buf[self.pos..end];
        self.pos = end;
        Ok(bytes)
    }

    fn be(&mut self, n: usize) -> Result<u64, WireError> {
        Ok(self
            .take(n)?
            .iter()
            .fold(0u64, |acc, &b| (acc << 8) | u64::from(b)))
    }

    fn length(&mut self, n: usize) -> Result<usize, WireError> {
        // Lengths are at most 32 bits; usize holds them on every target libroute supports.
        usize::try_from(self.be(n)?).map_err(|_| self.truncated())
    }

    /// A wrong marker at the current position: what was expected, and the byte found.
    fn unexpected<T>(&self, what: Expected) -> Result<T, WireError> {
        let found = self.peek()?;
        Err(Self::error(self.pos, WireProblem::Expected { what, found }))
    }

    /// Consumes a nil if one is next.
    pub(crate) fn nil(&mut self) -> Result<bool, WireError> {
        if self.peek()? == 0xc0 {
            self.pos += 1;
            return Ok(true);
        }
        Ok(false)
    }

    /// An array header: its element count.
    pub(crate) fn array(&mut self) -> Result<usize, WireError> {
        match self.peek()? {
            b @ 0x90..=0x9f => {
                self.pos += 1;
                Ok(usize::from(b & 0x0f))
            }
            0xdc => {
                self.pos += 1;
                self.length(2)
            }
            0xdd => {
                self.pos += 1;
                self.length(4)
            }
            _ => self.unexpected("an array"),
        }
    }

    /// A map header: its entry count. (Read where an array is the alternative, hence the
    /// error's wording.)
    pub(crate) fn map(&mut self) -> Result<usize, WireError> {
        match self.peek()? {
            b @ 0x80..=0x8f => {
                self.pos += 1;
                Ok(usize::from(b & 0x0f))
            }
            0xde => {
                self.pos += 1;
                self.length(2)
            }
            0xdf => {
                self.pos += 1;
                self.length(4)
            }
            _ => self.unexpected("an array or a map"),
        }
    }

    /// Whether the next value is an array (else, for the containers events use, a map).
    pub(crate) fn is_array(&self) -> Result<bool, WireError> {
        Ok(matches!(self.peek()?, 0x90..=0x9f | 0xdc | 0xdd))
    }

    /// An integer of either sign, as its 64-bit two's complement pattern.
    #[inline]
    pub(crate) fn int_bits(&mut self) -> Result<u64, WireError> {
        let b = self.peek()?;
        if b < 0x80 {
            self.pos += 1;
            return Ok(u64::from(b));
        }
        if b >= 0xe0 {
            self.pos += 1;
            return Ok(sign_extend(u64::from(b), 1));
        }
        let (n, signed) = match b {
            0xcc..=0xcf => (1usize << (b - 0xcc), false),
            0xd0..=0xd3 => (1usize << (b - 0xd0), true),
            _ => return self.unexpected("an integer"),
        };
        let body = self
            .buf
            .get(self.pos + 1..self.pos + 1 + n)
            .ok_or_else(|| self.truncated())?;
        // Fixed-width reads (the widths are the four cases), not a byte loop: token ids are most
        // of a payload.
        let raw = match body.len() {
            1 => u64::from(body[0]),
            2 => u64::from(u16::from_be_bytes([body[0], body[1]])),
            4 => u64::from(u32::from_be_bytes([body[0], body[1], body[2], body[3]])),
            _ => {
                let mut word = [0u8; 8];
                word.copy_from_slice(body);
                u64::from_be_bytes(word)
            }
        };
        self.pos += 1 + n;
        Ok(if signed { sign_extend(raw, n) } else { raw })
    }

    /// A non-negative integer of at most `max`.
    #[inline]
    pub(crate) fn uint(&mut self, max: u64) -> Result<u64, WireError> {
        let at = self.pos;
        let negative = matches!(self.peek()?, 0xe0..=0xff | 0xd0..=0xd3);
        let bits = self.int_bits()?;
        if (negative && bits >> 63 == 1) || bits > max {
            return Err(Self::error(at, WireProblem::OutOfRange { max }));
        }
        Ok(bits)
    }

    /// Skips `n` unsigned integers of at most `u32::MAX` (an array's elements), checking each.
    pub(crate) fn skip_u32s(&mut self, n: usize) -> Result<(), WireError> {
        for _ in 0..n {
            if let Some(width) = u32_width(self.peek()?) {
                self.pos += width as usize;
            } else {
                // Another encoding (a wider or signed form of a small value), or an error.
                self.uint(u64::from(u32::MAX))?;
            }
        }
        if self.pos > self.buf.len() {
            return Err(self.truncated());
        }
        Ok(())
    }

    /// `out.len() / 4` unsigned integers of at most `u32::MAX` each, written to `out` as
    /// little-endian bytes (as token ids are hashed).
    #[inline]
    pub(crate) fn u32s_le(&mut self, out: &mut [u8]) -> Result<(), WireError> {
        crate::host::hashing::write_u32s_le(out, || self.u32())
    }

    /// An unsigned integer of at most `u32::MAX`.
    #[inline]
    pub(crate) fn u32(&mut self) -> Result<u32, WireError> {
        let b = self.peek()?;
        let width = u32_width(b);
        let after = self.buf.get(self.pos + 1..self.pos + 5);
        if let (Some(width), Some(&[b1, b2, b3, b4])) = (width, after) {
            // The widths 2, 3 and 5 read the top 1, 2 or 4 of the 4 bytes after the marker.
            let word = u64::from(u32::from_be_bytes([b1, b2, b3, b4]));
            #[allow(clippy::cast_possible_truncation, reason = "at most 32 bits are left")]
            let value = (word >> (8 * (5 - width))) as u32;
            self.pos += width as usize;
            return Ok(if width == 1 { u32::from(b) } else { value });
        }
        let (value, pos) = Self::u32_rare(self.buf, self.pos)?;
        self.pos = pos;
        Ok(value)
    }

    /// [`Reader::u32`] at `pos` near the end of the payload, in another encoding (a wider or
    /// signed form of a small value), or an error; with the position after it. Kept out of line,
    /// and given the position rather than the cursor, so the common case inlines into the loops
    /// over token ids with the cursor in registers.
    #[cold]
    #[inline(never)]
    fn u32_rare(buf: &[u8], pos: usize) -> Result<(u32, usize), WireError> {
        let mut r = Reader::at(buf, pos);
        let value = r.uint(u64::from(u32::MAX))?;
        #[allow(clippy::cast_possible_truncation, reason = "read with max u32::MAX")]
        Ok((value as u32, r.pos))
    }

    /// A string's bytes (not checked to be UTF-8: they are compared or hashed, never shown).
    pub(crate) fn str(&mut self) -> Result<&'a [u8], WireError> {
        let n = match self.peek()? {
            b @ 0xa0..=0xbf => {
                self.pos += 1;
                usize::from(b & 0x1f)
            }
            b @ 0xd9..=0xdb => {
                self.pos += 1;
                self.length(1 << (b - 0xd9))?
            }
            _ => return self.unexpected("a string"),
        };
        self.take(n)
    }

    /// A block hash: an integer (its 64-bit pattern) or bytes (xxh3-64 of them, seed 0).
    #[inline]
    pub(crate) fn hash(&mut self) -> Result<u64, WireError> {
        match self.hash_bytes()? {
            Some(bytes) => Ok(xxhash_rust::xxh3::xxh3_64_with_seed(bytes, 0)),
            None => self.int_bits(),
        }
    }

    /// Checks a block hash and moves past it without hashing its bytes, for a pass that only
    /// checks (the hash is read again where it is used).
    #[inline]
    pub(crate) fn skip_hash(&mut self) -> Result<(), WireError> {
        match self.hash_bytes()? {
            Some(_) => Ok(()),
            None => self.int_bits().map(drop),
        }
    }

    /// A bytes-typed block hash's bytes, read; `None`, with nothing read, for an integer one.
    #[inline]
    fn hash_bytes(&mut self) -> Result<Option<&'a [u8]>, WireError> {
        match self.peek()? {
            b @ 0xc4..=0xc6 => {
                self.pos += 1;
                let n = self.length(1 << (b - 0xc4))?;
                self.take(n).map(Some)
            }
            0x00..=0x7f | 0xe0..=0xff | 0xcc..=0xcf | 0xd0..=0xd3 => Ok(None),
            _ => self.unexpected("a block hash (an integer or bytes)"),
        }
    }

    /// A float (or an integer, which msgpack encoders may write for whole numbers).
    pub(crate) fn float(&mut self) -> Result<f64, WireError> {
        match self.peek()? {
            0xca => {
                self.pos += 1;
                #[allow(clippy::cast_possible_truncation, reason = "4 bytes read")]
                let bits = self.be(4)? as u32;
                Ok(f64::from(f32::from_bits(bits)))
            }
            0xcb => {
                self.pos += 1;
                Ok(f64::from_bits(self.be(8)?))
            }
            0x00..=0x7f | 0xcc..=0xcf => Ok(self.int_bits()? as f64),
            0xe0..=0xff | 0xd0..=0xd3 => Ok(as_signed(self.int_bits()?) as f64),
            _ => self.unexpected("a number"),
        }
    }

    /// Skips one value of any type, containers with everything in them.
    pub(crate) fn skip(&mut self) -> Result<(), WireError> {
        let mut pending: u64 = 1;
        while pending > 0 {
            pending -= 1;
            let at = self.pos;
            let b = self.byte()?;
            let body = match b {
                0x00..=0x7f | 0xe0..=0xff | 0xc0 | 0xc2 | 0xc3 => Some(0),
                0x80..=0x8f => {
                    pending += 2 * u64::from(b & 0x0f);
                    Some(0)
                }
                0x90..=0x9f => {
                    pending += u64::from(b & 0x0f);
                    Some(0)
                }
                0xa0..=0xbf => Some(usize::from(b & 0x1f)),
                0xc4 | 0xd9 => Some(self.length(1)?),
                0xc5 | 0xda => Some(self.length(2)?),
                0xc6 | 0xdb => Some(self.length(4)?),
                0xc7 => Some(self.length(1)? + 1),
                0xc8 => Some(self.length(2)? + 1),
                0xc9 => Some(self.length(4)?.saturating_add(1)),
                // Numbers by width: float 32/64, uint 8..64 (0xcc..), int 8..64 (0xd0..).
                0xca | 0xce | 0xd2 => Some(4),
                0xcb | 0xcf | 0xd3 => Some(8),
                0xcc | 0xd0 => Some(1),
                0xcd | 0xd1 | 0xd4 => Some(2),
                // fixext 2, 4, 8, 16: a type byte and the data.
                0xd5 => Some(3),
                0xd6 => Some(5),
                0xd7 => Some(9),
                0xd8 => Some(17),
                0xdc | 0xdd => {
                    pending += self.be(if b == 0xdc { 2 } else { 4 })?;
                    Some(0)
                }
                0xde | 0xdf => {
                    pending += 2 * self.be(if b == 0xde { 2 } else { 4 })?;
                    Some(0)
                }
                // 0xc1 is never used.
                _ => None,
            };
            match body {
                Some(n) => {
                    self.take(n)?;
                }
                None => {
                    return Err(Self::error(
                        at,
                        WireProblem::Expected {
                            what: "a MessagePack value",
                            found: b,
                        },
                    ));
                }
            }
        }
        Ok(())
    }
}

/// The two's complement value of a 64-bit pattern.
#[allow(
    clippy::cast_possible_wrap,
    reason = "reinterpreting the bits is the point"
)]
const fn as_signed(bits: u64) -> i64 {
    bits as i64
}

/// `raw`, an `n`-byte two's complement integer, widened to 64 bits.
#[allow(
    clippy::cast_possible_wrap,
    clippy::cast_sign_loss,
    clippy::cast_possible_truncation,
    reason = "sign extension by shifting the pattern; n is 1 to 8"
)]
const fn sign_extend(raw: u64, n: usize) -> u64 {
    let shift = 64 - 8 * n as u32;
    (((raw << shift) as i64) >> shift) as u64
}

#[cfg(test)]
mod tests {
    use std::vec;
    use std::vec::Vec;

    use super::*;

    /// `value` in every integer form msgpack has that holds it, smallest first.
    fn forms(value: i64) -> Vec<Vec<u8>> {
        let mut out = Vec::new();
        if let Ok(v) = u8::try_from(value) {
            if v < 0x80 {
                out.push(vec![v]);
            }
        }
        if let Ok(v) = i8::try_from(value) {
            if (-32..0).contains(&v) {
                out.push(v.to_be_bytes().to_vec());
            }
        }
        let mut push = |marker: u8, body: &[u8]| {
            let mut form = vec![marker];
            form.extend_from_slice(body);
            out.push(form);
        };
        if let Ok(v) = u8::try_from(value) {
            push(0xcc, &v.to_be_bytes());
        }
        if let Ok(v) = u16::try_from(value) {
            push(0xcd, &v.to_be_bytes());
        }
        if let Ok(v) = u32::try_from(value) {
            push(0xce, &v.to_be_bytes());
        }
        if let Ok(v) = u64::try_from(value) {
            push(0xcf, &v.to_be_bytes());
        }
        if let Ok(v) = i8::try_from(value) {
            push(0xd0, &v.to_be_bytes());
        }
        if let Ok(v) = i16::try_from(value) {
            push(0xd1, &v.to_be_bytes());
        }
        if let Ok(v) = i32::try_from(value) {
            push(0xd2, &v.to_be_bytes());
        }
        push(0xd3, &value.to_be_bytes());
        out
    }

    /// The token-id readers (`u32`, `skip_u32s`, `u32s_le`) against the general `uint`, for
    /// every form of values around each width's edges, with 0 to 9 bytes after the value (the
    /// readers take a faster path when 5 or 8 bytes follow), and cut short anywhere.
    #[test]
    fn token_ids_read_as_the_general_reader_reads_them() {
        let values = [
            0,
            1,
            0x7f,
            0x80,
            0xff,
            0x100,
            0xffff,
            0x1_0000,
            152_063,
            0xffff_ffff,
            0x1_0000_0000,
            -1,
            -32,
            -33,
            i64::MIN,
        ];
        for value in values {
            for form in forms(value) {
                for tail in 0..10 {
                    let mut buf = form.clone();
                    buf.extend((0..tail).map(|i| 0xc1 - i));
                    for cut in 0..=form.len() {
                        let buf = &buf[..if cut == form.len() { buf.len() } else { cut }];
                        let mut general = Reader::new(buf);
                        let want = general
                            .uint(u64::from(u32::MAX))
                            .map(|v| (u32::try_from(v).unwrap(), general.pos));
                        let mut r = Reader::new(buf);
                        let got = r.u32().map(|v| (v, r.pos));
                        assert_eq!(got, want, "u32 of {value} as {form:x?}, {buf:x?}");
                        let mut r = Reader::new(buf);
                        let skipped = r.skip_u32s(1).map(|()| r.pos);
                        assert_eq!(skipped, want.map(|(_, pos)| pos), "skip of {buf:x?}");
                        let mut r = Reader::new(buf);
                        let mut out = [0u8; 4];
                        let written = r
                            .u32s_le(&mut out)
                            .map(|()| (u32::from_le_bytes(out), r.pos));
                        assert_eq!(written, want, "u32s_le of {buf:x?}");
                    }
                }
            }
        }
    }
}
