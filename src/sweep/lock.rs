//! One sweep per result directory: `--out/.lock` is created exclusively and
//! holds the owner's pid; it goes when the sweep ends (the guard's Drop). A
//! lock whose process no longer exists is stale and is taken over with a note.

use std::io::Write;
use std::path::{Path, PathBuf};

/// The lock of a result directory, released on drop.
#[derive(Debug)]
pub struct Lock {
    path: PathBuf,
}

impl Lock {
    /// Takes the lock of `dir` (which must exist).
    pub fn take(dir: &Path) -> Result<Lock, String> {
        let path = dir.join(".lock");
        for _ in 0..2 {
            match std::fs::OpenOptions::new()
                .write(true)
                .create_new(true)
                .open(&path)
            {
                Ok(mut f) => {
                    writeln!(f, "{}", std::process::id())
                        .map_err(|e| format!("{}: {e}", path.display()))?;
                    return Ok(Lock { path });
                }
                Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {
                    let owner = std::fs::read_to_string(&path).unwrap_or_default();
                    let pid = owner.trim();
                    if pid_alive(pid) {
                        return Err(format!(
                            "{} is in use by another sweep (process {pid}, lock {}); wait for it, or use another --out",
                            dir.display(),
                            path.display()
                        ));
                    }
                    eprintln!(
                        "note: removing the stale lock {} (process '{pid}' is gone)",
                        path.display()
                    );
                    std::fs::remove_file(&path).map_err(|e| format!("{}: {e}", path.display()))?;
                }
                Err(e) => return Err(format!("{}: {e}", path.display())),
            }
        }
        Err(format!("{}: could not take the lock", path.display()))
    }
}

/// Whether `pid` names a live process (Linux: /proc/<pid> exists).
fn pid_alive(pid: &str) -> bool {
    pid.parse::<u32>()
        .is_ok_and(|p| Path::new(&format!("/proc/{p}")).exists())
}

impl Drop for Lock {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.path);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_held_lock_refuses_and_a_stale_one_is_taken_over() {
        let dir = tempfile::tempdir().unwrap();
        let first = Lock::take(dir.path()).unwrap();
        let e = Lock::take(dir.path()).unwrap_err();
        assert!(e.contains("is in use by another sweep"), "{e}");
        assert!(
            e.contains(&format!("process {}", std::process::id())),
            "{e}"
        );
        drop(first);
        assert!(!dir.path().join(".lock").exists());
        // A pid that cannot exist: the lock is stale.
        std::fs::write(dir.path().join(".lock"), "4294967295\n").unwrap();
        let _again = Lock::take(dir.path()).unwrap();
    }
}
