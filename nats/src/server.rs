//! A local `nats-server -js` for examples and tests: loopback only, its own store directory,
//! stopped when dropped.

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
    /// it) on a loopback port it picks itself (a port found free beforehand could be taken
    /// before the server binds it) and reports in a ports file, storing streams under `store`,
    /// and waits until it accepts connections.
    ///
    /// # Errors
    ///
    /// [`Error::Server`] naming what failed: no binary, or no listening server within 10 s.
    pub fn start(store: &Path) -> Result<Self, Error> {
        Self::spawn(store, None)
    }

    /// Starts it on `port` (a restart keeps the port, so clients reconnect).
    ///
    /// # Errors
    ///
    /// As [`LocalServer::start`].
    pub fn start_on(store: &Path, port: u16) -> Result<Self, Error> {
        Self::spawn(store, Some(port))
    }

    fn spawn(store: &Path, port: Option<u16>) -> Result<Self, Error> {
        let binary = binary().ok_or_else(|| {
            Error::Server(
                "nats-server not found on PATH or at /usr/sbin/nats-server \
                 (Debian: apt-get install nats-server; `cargo xtask nats` installs it)"
                    .to_owned(),
            )
        })?;
        // -1: a port of the server's choosing, written to the ports file.
        let port_arg = port.map_or_else(|| "-1".to_owned(), |p| p.to_string());
        let mut child = Command::new(&binary)
            .args(["-js", "-a", "127.0.0.1", "-p", &port_arg, "-sd"])
            .arg(store)
            .arg("--ports_file_dir")
            .arg(store)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .map_err(|e| Error::Server(format!("cannot run {}: {e}", binary.display())))?;
        let ports_file = store.join(format!("nats-server_{}.ports", child.id()));
        let deadline = Instant::now() + Duration::from_secs(10);
        let mut server = Self {
            child: None,
            port: port.unwrap_or(0),
            store: store.to_owned(),
        };
        loop {
            if let Ok(Some(status)) = child.try_wait() {
                return Err(Error::Server(format!(
                    "nats-server exited with {status} (port {port_arg} taken?)"
                )));
            }
            if server.port == 0 {
                server.port = std::fs::read_to_string(&ports_file)
                    .ok()
                    .and_then(|text| client_port(&text))
                    .unwrap_or(0);
            }
            if server.port != 0 && std::net::TcpStream::connect(("127.0.0.1", server.port)).is_ok()
            {
                server.child = Some(child);
                return Ok(server);
            }
            if Instant::now() > deadline {
                let _ = child.kill();
                let _ = child.wait();
                return Err(Error::Server(format!(
                    "nats-server did not listen on port {port_arg} within 10 s"
                )));
            }
            std::thread::sleep(Duration::from_millis(20));
        }
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

/// The client port in a ports file: `{"nats":["nats://127.0.0.1:4222"],...}`.
fn client_port(text: &str) -> Option<u16> {
    let after = &text[text.find("\"nats\"")?..];
    let url = &after[after.find("nats://")? + "nats://".len()..];
    let end = url.find('"')?;
    url[..end].rsplit(':').next()?.parse().ok()
}

fn binary() -> Option<PathBuf> {
    std::env::var_os("PATH")
        .into_iter()
        .flat_map(|p| std::env::split_paths(&p).collect::<Vec<_>>())
        .chain([PathBuf::from("/usr/sbin"), PathBuf::from("/usr/local/bin")])
        .map(|d| d.join("nats-server"))
        .find(|p| p.is_file())
}

#[cfg(test)]
mod tests {
    #[test]
    fn the_client_port_is_read_from_the_ports_file() {
        let text = r#"{"nats":["nats://127.0.0.1:39811"],"monitoring":["http://127.0.0.1:8222"]}"#;
        assert_eq!(super::client_port(text), Some(39811));
        assert_eq!(super::client_port("{}"), None);
        assert_eq!(
            super::client_port(r#"{"nats":["nats://127.0.0.1:x"]}"#),
            None
        );
    }
}
