//! The part of ZeroMQ's wire protocol (ZMTP 3.0, RFC 23, NULL security) a subscriber needs: a
//! SUB or DEALER socket over one TCP connection, speaking to libzmq's PUB and ROUTER sockets.
//!
//! A connection exchanges greetings and READY commands, then multipart messages: each frame is
//! a flags byte (more, long, command), a size (1 or 8 bytes) and the body. Bytes are buffered
//! until a whole message is in, so a read timeout never leaves a frame half read.

use std::io::{self, Read, Write};
use std::net::{TcpStream, ToSocketAddrs};
use std::time::{Duration, Instant};

const MORE: u8 = 0x01;
const LONG: u8 = 0x02;
const COMMAND: u8 = 0x04;

/// The ZeroMQ socket types a subscriber uses.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SocketType {
    /// Receives a PUB socket's messages.
    Sub,
    /// Talks to a ROUTER socket (the engines' replay socket).
    Dealer,
}

impl SocketType {
    fn name(self) -> &'static [u8] {
        match self {
            SocketType::Sub => b"SUB",
            SocketType::Dealer => b"DEALER",
        }
    }
}

/// The largest frame, and the most bytes of a message's frames before its last, a connection
/// accepts: 64 MiB. An engine's batch is a few kilobytes; a peer announcing more is refused at
/// once rather than buffered without bound.
pub const MAX_FRAME: u64 = 64 << 20;

/// One ZMTP connection.
#[derive(Debug)]
pub struct Connection {
    stream: TcpStream,
    frames: Frames,
}

/// Incoming bytes cut into ZMTP frames and messages: a connection pushes in what it reads, and
/// takes out the greeting, then whole messages. Apart from the socket, so any byte stream (and
/// any way of cutting it into reads) can be checked.
#[derive(Debug, Default)]
pub struct Frames {
    buf: Vec<u8>,
}

/// A whole message: its frames' bodies, and whether it is a command (READY, PING, ...).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Message {
    /// Whether the first frame has the COMMAND flag.
    pub command: bool,
    /// The bodies of its frames, in order (at least one).
    pub frames: Vec<Vec<u8>>,
}

fn invalid(what: impl Into<String>) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidData, what.into())
}

/// `tcp://host:port` as a socket address string.
fn tcp_address(endpoint: &str) -> io::Result<&str> {
    endpoint
        .strip_prefix("tcp://")
        .ok_or_else(|| invalid(format!("{endpoint}: only tcp:// endpoints are supported")))
}

impl Connection {
    /// Connects to `endpoint` (`tcp://host:port`) as a socket of type `kind`, within `timeout`,
    /// and completes the handshake.
    ///
    /// # Errors
    ///
    /// Connection errors, and `InvalidData` for a peer that does not speak ZMTP 3 with NULL
    /// security.
    pub fn connect(endpoint: &str, kind: SocketType, timeout: Duration) -> io::Result<Self> {
        let address = tcp_address(endpoint)?
            .to_socket_addrs()?
            .next()
            .ok_or_else(|| invalid(format!("{endpoint}: no address")))?;
        let stream = TcpStream::connect_timeout(&address, timeout)?;
        stream.set_nodelay(true)?;
        let mut conn = Connection {
            stream,
            frames: Frames::default(),
        };
        conn.handshake(kind, timeout)?;
        Ok(conn)
    }

    fn handshake(&mut self, kind: SocketType, timeout: Duration) -> io::Result<()> {
        // Signature, version 3.0, mechanism NULL, as-server 0, filler.
        let mut greeting = [0u8; 64];
        greeting[0] = 0xff;
        greeting[8] = 0x01;
        greeting[9] = 0x7f;
        greeting[10] = 3;
        greeting[11] = 0;
        greeting[12..16].copy_from_slice(b"NULL");
        self.stream.write_all(&greeting)?;
        let deadline = Instant::now() + timeout;
        while !self.frames.take_greeting()? {
            self.fill(deadline)?;
        }
        let mut ready = Vec::new();
        ready.push(5);
        ready.extend_from_slice(b"READY");
        property(&mut ready, b"Socket-Type", kind.name());
        if kind == SocketType::Dealer {
            property(&mut ready, b"Identity", b"");
        }
        self.send_frame(COMMAND, &ready)?;
        loop {
            if let Some((flags, body)) = self.frames.take_frame()? {
                if flags & COMMAND != 0 && body.starts_with(b"\x05READY") {
                    return Ok(());
                }
                if flags & COMMAND != 0 && body.starts_with(b"\x05ERROR") {
                    return Err(invalid(format!(
                        "the peer refused the connection: {}",
                        String::from_utf8_lossy(body.get(7..).unwrap_or_default())
                    )));
                }
                return Err(invalid("the peer sent something other than READY"));
            }
            self.fill(deadline)?;
        }
    }

    fn send_frame(&mut self, flags: u8, body: &[u8]) -> io::Result<()> {
        let mut head = Vec::with_capacity(9);
        if let Ok(short) = u8::try_from(body.len()) {
            head.push(flags);
            head.push(short);
        } else {
            head.push(flags | LONG);
            head.extend_from_slice(&(body.len() as u64).to_be_bytes());
        }
        self.stream.write_all(&head)?;
        self.stream.write_all(body)
    }

    /// Sends one multipart message.
    ///
    /// # Errors
    ///
    /// The socket's write errors.
    pub fn send(&mut self, frames: &[&[u8]]) -> io::Result<()> {
        for (i, frame) in frames.iter().enumerate() {
            let more = if i + 1 < frames.len() { MORE } else { 0 };
            self.send_frame(more, frame)?;
        }
        self.stream.flush()
    }

    /// Reads what the peer sent, waiting until `deadline`.
    fn fill(&mut self, deadline: Instant) -> io::Result<()> {
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return Err(io::ErrorKind::TimedOut.into());
        }
        self.stream.set_read_timeout(Some(left))?;
        let mut chunk = [0u8; 1 << 14];
        match self.stream.read(&mut chunk) {
            Ok(0) => Err(io::ErrorKind::UnexpectedEof.into()),
            Ok(n) => {
                self.frames.push(&chunk[..n]);
                Ok(())
            }
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => Err(io::ErrorKind::TimedOut.into()),
            Err(e) => Err(e),
        }
    }

    /// The next whole message, waiting until `deadline`; `Ok(None)` when none came in time.
    /// Commands between messages (heartbeats) are answered or skipped.
    ///
    /// # Errors
    ///
    /// The socket's read errors (`UnexpectedEof` when the peer closed), and `InvalidData` for
    /// bytes that are not ZMTP frames.
    pub fn recv(&mut self, deadline: Instant) -> io::Result<Option<Vec<Vec<u8>>>> {
        loop {
            if let Some(message) = self.frames.take_message()? {
                if !message.command {
                    return Ok(Some(message.frames));
                }
                if message.frames[0].starts_with(b"\x04PING") {
                    // PONG carries the PING's context (after its 2-byte TTL).
                    let mut pong = b"\x04PONG".to_vec();
                    pong.extend_from_slice(message.frames[0].get(7..).unwrap_or_default());
                    self.send_frame(COMMAND, &pong)?;
                }
                continue;
            }
            match self.fill(deadline) {
                Ok(()) => {}
                Err(e) if e.kind() == io::ErrorKind::TimedOut => return Ok(None),
                Err(e) => return Err(e),
            }
        }
    }
}

impl Frames {
    /// Appends bytes read from the peer.
    pub fn push(&mut self, bytes: &[u8]) {
        self.buf.extend_from_slice(bytes);
    }

    /// Bytes pushed and not yet taken.
    #[must_use]
    pub fn buffered(&self) -> usize {
        self.buf.len()
    }

    /// Takes the peer's 64-byte greeting: `Ok(false)` until all of it is in.
    ///
    /// # Errors
    ///
    /// `InvalidData` for a greeting that is not ZMTP 3 with NULL security.
    pub fn take_greeting(&mut self) -> io::Result<bool> {
        let Some(peer) = self.buf.get(..64) else {
            return Ok(false);
        };
        if peer[0] != 0xff || peer[9] != 0x7f || peer[10] < 3 {
            return Err(invalid("the peer's greeting is not ZMTP 3"));
        }
        if &peer[12..16] != b"NULL" || peer[16..32].iter().any(|&b| b != 0) {
            return Err(invalid("the peer does not use NULL security"));
        }
        self.buf.drain(..64);
        Ok(true)
    }

    /// One whole frame (flags, body), if one is in.
    ///
    /// # Errors
    ///
    /// `InvalidData` for bytes that are not a ZMTP 3 frame, or a frame above [`MAX_FRAME`].
    pub fn take_frame(&mut self) -> io::Result<Option<(u8, Vec<u8>)>> {
        let Some((flags, start, len)) = self.frame_at(0)? else {
            return Ok(None);
        };
        let body = self.buf[start..start + len].to_vec();
        self.buf.drain(..start + len);
        Ok(Some((flags, body)))
    }

    /// The frame starting at `at` of the buffer: its flags, body offset and length, if whole.
    fn frame_at(&self, at: usize) -> io::Result<Option<(u8, usize, usize)>> {
        let Some(&flags) = self.buf.get(at) else {
            return Ok(None);
        };
        if flags & !(MORE | LONG | COMMAND) != 0 {
            return Err(invalid(format!("frame flags 0x{flags:02x} are not ZMTP 3")));
        }
        let (start, len) = if flags & LONG == 0 {
            let Some(&len) = self.buf.get(at + 1) else {
                return Ok(None);
            };
            (at + 2, usize::from(len))
        } else {
            let Some(bytes) = self.buf.get(at + 1..at + 9) else {
                return Ok(None);
            };
            let mut size = [0u8; 8];
            size.copy_from_slice(bytes);
            let size = u64::from_be_bytes(size);
            if size > MAX_FRAME {
                return Err(invalid(format!(
                    "a frame of {size} bytes, above the limit of {MAX_FRAME}"
                )));
            }
            (at + 9, usize::try_from(size).unwrap_or(usize::MAX))
        };
        Ok((self.buf.len() >= start.saturating_add(len)).then_some((flags, start, len)))
    }

    /// One whole message (frames up to one without MORE), if one is in.
    ///
    /// # Errors
    ///
    /// As [`Frames::take_frame`], and `InvalidData` for a message whose frames before the last
    /// exceed [`MAX_FRAME`] bytes.
    pub fn take_message(&mut self) -> io::Result<Option<Message>> {
        let mut at = 0;
        let mut ends = Vec::new();
        while let Some((flags, start, len)) = self.frame_at(at)? {
            ends.push((start, len));
            at = start + len;
            if flags & MORE != 0 && at as u64 > MAX_FRAME {
                return Err(invalid(format!(
                    "a message of more than {MAX_FRAME} bytes before its last frame"
                )));
            }
            if flags & MORE == 0 {
                let message = Message {
                    command: self.buf[0] & COMMAND != 0,
                    frames: ends
                        .iter()
                        .map(|&(start, len)| self.buf[start..start + len].to_vec())
                        .collect(),
                };
                self.buf.drain(..at);
                return Ok(Some(message));
            }
        }
        Ok(None)
    }
}

fn property(out: &mut Vec<u8>, name: &[u8], value: &[u8]) {
    out.push(u8::try_from(name.len()).unwrap_or(u8::MAX));
    out.extend_from_slice(name);
    out.extend_from_slice(&u32::try_from(value.len()).unwrap_or(u32::MAX).to_be_bytes());
    out.extend_from_slice(value);
}

#[cfg(test)]
mod tests {
    use super::*;

    fn greeting() -> Vec<u8> {
        let mut g = vec![0u8; 64];
        g[0] = 0xff;
        g[9] = 0x7f;
        g[10] = 3;
        g[12..16].copy_from_slice(b"NULL");
        g
    }

    fn kind(e: &io::Error) -> (io::ErrorKind, String) {
        (e.kind(), e.to_string())
    }

    #[test]
    fn messages_come_out_whole_however_the_bytes_are_cut() {
        let mut stream = greeting();
        stream.extend_from_slice(&[COMMAND, 6]);
        stream.extend_from_slice(b"\x05READY");
        // (topic, seq, payload): a short frame, a long-form frame of 8 bytes, a 300-byte frame.
        stream.extend_from_slice(&[MORE, 2, b'k', b'v']);
        stream.extend_from_slice(&[MORE | LONG, 0, 0, 0, 0, 0, 0, 0, 8]);
        stream.extend_from_slice(&7u64.to_be_bytes());
        stream.extend_from_slice(&[LONG, 0, 0, 0, 0, 0, 0, 1, 44]);
        stream.extend(std::iter::repeat_n(0xab, 300));
        for cut in 1..=stream.len() {
            let mut frames = Frames::default();
            let mut got = Vec::new();
            let mut greeted = false;
            for piece in stream.chunks(cut) {
                frames.push(piece);
                if !greeted {
                    greeted = frames.take_greeting().unwrap();
                }
                if greeted {
                    while let Some(m) = frames.take_message().unwrap() {
                        got.push(m);
                    }
                }
            }
            assert_eq!(got.len(), 2, "cut every {cut} bytes");
            assert_eq!(
                got[0],
                Message {
                    command: true,
                    frames: vec![b"\x05READY".to_vec()]
                }
            );
            assert!(!got[1].command);
            assert_eq!(got[1].frames[0], b"kv");
            assert_eq!(got[1].frames[1], 7u64.to_be_bytes());
            assert_eq!(got[1].frames[2], vec![0xab; 300]);
            assert_eq!(frames.buffered(), 0);
        }
    }

    #[test]
    fn a_greeting_without_zmtp_3_and_null_security_is_refused() {
        let mut frames = Frames::default();
        frames.push(&greeting()[..63]);
        assert!(
            !frames.take_greeting().unwrap(),
            "63 bytes are not a greeting yet"
        );
        let mut old = greeting();
        old[10] = 2;
        let mut curve = greeting();
        curve[12..17].copy_from_slice(b"CURVE");
        for (bytes, sentence) in [
            (old, "the peer's greeting is not ZMTP 3"),
            (curve, "the peer does not use NULL security"),
        ] {
            let mut frames = Frames::default();
            frames.push(&bytes);
            let e = frames.take_greeting().unwrap_err();
            assert_eq!(kind(&e), (io::ErrorKind::InvalidData, sentence.to_owned()));
        }
    }

    #[test]
    fn bad_flags_and_oversized_frames_are_refused_as_soon_as_their_header_is_in() {
        let mut frames = Frames::default();
        frames.push(&[0x08, 1, 0]);
        let e = frames.take_message().unwrap_err();
        assert_eq!(
            kind(&e),
            (
                io::ErrorKind::InvalidData,
                "frame flags 0x08 are not ZMTP 3".to_owned()
            )
        );
        // 64 MiB + 1 announced: refused before a byte of the body arrives.
        let mut frames = Frames::default();
        frames.push(&[LONG]);
        frames.push(&(MAX_FRAME + 1).to_be_bytes());
        let e = frames.take_message().unwrap_err();
        assert_eq!(
            kind(&e),
            (
                io::ErrorKind::InvalidData,
                format!(
                    "a frame of {} bytes, above the limit of {MAX_FRAME}",
                    MAX_FRAME + 1
                )
            )
        );
        // Exactly the limit is waited for.
        let mut frames = Frames::default();
        frames.push(&[LONG]);
        frames.push(&MAX_FRAME.to_be_bytes());
        assert_eq!(frames.take_message().unwrap(), None);
    }

    #[test]
    fn a_message_of_endless_frames_is_refused_at_the_limit() {
        let mut frames = Frames::default();
        let frame = [MORE | LONG, 0, 0, 0, 0, 0, 0x10, 0, 0]; // 1 MiB, more to come
        let body = vec![0u8; 1 << 20];
        let mut refused = None;
        for i in 0..70 {
            frames.push(&frame);
            frames.push(&body);
            if let Err(e) = frames.take_message() {
                refused = Some((i, e.to_string()));
                break;
            }
        }
        // 64 frames of 1 MiB and their headers are just over the limit.
        assert_eq!(
            refused,
            Some((
                63,
                format!("a message of more than {MAX_FRAME} bytes before its last frame")
            ))
        );
    }
}
