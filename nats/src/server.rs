//! A local `nats-server -js` for examples and tests: loopback only, its own store directory,
//! stopped when dropped.

use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use crate::Error;

/// A `nats-server` child process with JetStream, listening on 127.0.0.1.
#[derive(Debug)]
pub struct LocalServer {
    child: Option<Child>,
    port: u16,
    store: PathBuf,
}

impl LocalServer {
    /// Starts `nats-server -js` (found on `PATH`, or `/usr/sbin/nats-server` as Debian installs
    /// it) on a free loopback port, storing streams under `store`, and waits until it accepts
    /// connections.
    ///
    /// # Errors
    ///
    /// [`Error::Server`] naming what failed: no binary, or no listening server within 10 s.
    pub fn start(store: &Path) -> Result<Self, Error> {
        let port = TcpListener::bind("127.0.0.1:0")
            .and_then(|l| l.local_addr())
            .map_err(|e| Error::Server(format!("no free loopback port: {e}")))?
            .port();
        Self::start_on(store, port)
    }

    /// Starts it on `port` (a restart keeps the port, so clients reconnect).
    ///
    /// # Errors
    ///
    /// As [`LocalServer::start`].
    pub fn start_on(store: &Path, port: u16) -> Result<Self, Error> {
        let binary = binary().ok_or_else(|| {
            Error::Server(
                "nats-server not found on PATH or at /usr/sbin/nats-server \
                 (Debian: apt-get install nats-server; `cargo xtask nats` installs it)"
                    .to_owned(),
            )
        })?;
        let child = Command::new(&binary)
            .args(["-js", "-a", "127.0.0.1", "-p", &port.to_string(), "-sd"])
            .arg(store)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .map_err(|e| Error::Server(format!("cannot run {}: {e}", binary.display())))?;
        let mut server = Self {
            child: Some(child),
            port,
            store: store.to_owned(),
        };
        let deadline = Instant::now() + Duration::from_secs(10);
        while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
            if let Some(Ok(Some(status))) = server.child.as_mut().map(Child::try_wait) {
                return Err(Error::Server(format!(
                    "nats-server exited with {status} (port {port} taken?)"
                )));
            }
            if Instant::now() > deadline {
                return Err(Error::Server(format!(
                    "nats-server did not listen on port {port} within 10 s"
                )));
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        Ok(server)
    }

    /// Its URL.
    #[must_use]
    pub fn url(&self) -> String {
        format!("nats://127.0.0.1:{}", self.port)
    }

    /// Its port.
    #[must_use]
    pub fn port(&self) -> u16 {
        self.port
    }

    /// Kills the server (SIGKILL: what a crash does) and waits for it to exit.
    pub fn kill(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    /// Kills it and starts it again on the same port over the same store.
    ///
    /// # Errors
    ///
    /// As [`LocalServer::start`].
    pub fn restart(&mut self) -> Result<(), Error> {
        self.kill();
        *self = Self::start_on(&self.store.clone(), self.port)?;
        Ok(())
    }
}

impl Drop for LocalServer {
    fn drop(&mut self) {
        self.kill();
    }
}

fn binary() -> Option<PathBuf> {
    std::env::var_os("PATH")
        .into_iter()
        .flat_map(|p| std::env::split_paths(&p).collect::<Vec<_>>())
        .chain([PathBuf::from("/usr/sbin"), PathBuf::from("/usr/local/bin")])
        .map(|d| d.join("nats-server"))
        .find(|p| p.is_file())
}
