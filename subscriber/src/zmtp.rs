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

/// One ZMTP connection.
#[derive(Debug)]
pub struct Connection {
    stream: TcpStream,
    buf: Vec<u8>,
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
            buf: Vec::with_capacity(1 << 16),
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
        while self.buf.len() < 64 {
            self.fill(deadline)?;
        }
        let peer: Vec<u8> = self.buf.drain(..64).collect();
        if peer[0] != 0xff || peer[9] != 0x7f || peer[10] < 3 {
            return Err(invalid("the peer's greeting is not ZMTP 3"));
        }
        if &peer[12..16] != b"NULL" || peer[16..32].iter().any(|&b| b != 0) {
            return Err(invalid("the peer does not use NULL security"));
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
            if let Some((flags, body)) = self.take_frame()? {
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
                self.buf.extend_from_slice(&chunk[..n]);
                Ok(())
            }
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => Err(io::ErrorKind::TimedOut.into()),
            Err(e) => Err(e),
        }
    }

    /// One whole frame from the buffer, if one is in.
    fn take_frame(&mut self) -> io::Result<Option<(u8, Vec<u8>)>> {
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
            let len = usize::try_from(u64::from_be_bytes(size))
                .map_err(|_| invalid("a frame larger than memory"))?;
            (at + 9, len)
        };
        Ok((self.buf.len() >= start.saturating_add(len)).then_some((flags, start, len)))
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
            // A whole message: frames up to one without MORE.
            let mut at = 0;
            let mut ends = Vec::new();
            let mut whole = false;
            while let Some((flags, start, len)) = self.frame_at(at)? {
                ends.push((flags, start, len));
                at = start + len;
                if flags & MORE == 0 {
                    whole = true;
                    break;
                }
            }
            if whole {
                let message: Vec<Vec<u8>> = ends
                    .iter()
                    .map(|&(_, start, len)| self.buf[start..start + len].to_vec())
                    .collect();
                let command = ends[0].0 & COMMAND != 0;
                self.buf.drain(..at);
                if command {
                    if message[0].starts_with(b"\x04PING") {
                        // PONG carries the PING's context (after its 2-byte TTL).
                        let mut pong = b"\x04PONG".to_vec();
                        pong.extend_from_slice(message[0].get(7..).unwrap_or_default());
                        self.send_frame(COMMAND, &pong)?;
                    }
                    continue;
                }
                return Ok(Some(message));
            }
            match self.fill(deadline) {
                Ok(()) => {}
                Err(e) if e.kind() == io::ErrorKind::TimedOut => return Ok(None),
                Err(e) => return Err(e),
            }
        }
    }
}

fn property(out: &mut Vec<u8>, name: &[u8], value: &[u8]) {
    out.push(u8::try_from(name.len()).unwrap_or(u8::MAX));
    out.extend_from_slice(name);
    out.extend_from_slice(&u32::try_from(value.len()).unwrap_or(u32::MAX).to_be_bytes());
    out.extend_from_slice(value);
}
