//! A scratch directory for one test, removed unless the test failed.

use std::path::PathBuf;

pub struct Scratch(pub PathBuf);

impl Scratch {
    /// `tlsrum-TAG-PID` under the system's temporary directory, empty.
    pub fn new(tag: &str) -> Self {
        let d = std::env::temp_dir().join(format!("tlsrum-{tag}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        std::fs::create_dir_all(&d).unwrap();
        Scratch(d)
    }

    pub fn path(&self, name: &str) -> PathBuf {
        self.0.join(name)
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        if std::thread::panicking() {
            eprintln!("test files kept in {}", self.0.display());
        } else {
            let _ = std::fs::remove_dir_all(&self.0);
        }
    }
}
