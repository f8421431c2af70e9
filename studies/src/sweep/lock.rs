//! One sweep per result directory: `--out/.lock` is locked (`flock`, so the
//! operating system releases it when its process ends, even by SIGKILL) and
//! holds the owner's pid, which a refused second sweep names. The file goes
//! when the sweep ends (the guard's Drop); one left by a killed sweep is
//! unlocked and taken over with a note.

use std::fs::{File, TryLockError};
use std::io::{Read, Seek, Write};
use std::path::{Path, PathBuf};

/// The lock of a result directory, released on drop.
#[derive(Debug)]
pub struct Lock {
    path: PathBuf,
    /// Holds the OS lock while open.
    _file: File,
}

impl Lock {
    /// Takes the lock of `dir` (which must exist).
    pub fn take(dir: &Path) -> Result<Lock, String> {
        let path = dir.join(".lock");
        let io = |e: std::io::Error| format!("{}: {e}", path.display());
        // A holder that ends removes the file: if it did so after we opened
        // it, we locked a file no one else sees; open the new one again.
        for _ in 0..8 {
            let mut file = File::options()
                .read(true)
                .write(true)
                .create(true)
                .truncate(false)
                .open(&path)
                .map_err(io)?;
            match file.try_lock() {
                Ok(()) if same_file(&file, &path) => {
                    let before = contents(&mut file);
                    if !before.is_empty() {
                        eprintln!(
                            "note: taking over the lock {} of process {before}, which ended without releasing it",
                            path.display()
                        );
                    }
                    file.set_len(0).map_err(io)?;
                    file.rewind().map_err(io)?;
                    writeln!(file, "{}", std::process::id()).map_err(io)?;
                    return Ok(Lock { path, _file: file });
                }
                Ok(()) => continue,
                Err(TryLockError::WouldBlock) => {
                    return Err(format!(
                        "{} is in use by another sweep (process {}, lock {}); wait for it to finish, or use another --out",
                        dir.display(),
                        holder(&mut file),
                        path.display()
                    ));
                }
                Err(TryLockError::Error(e)) => return Err(io(e)),
            }
        }
        Err(format!(
            "{}: could not take the lock (it kept being replaced); try again",
            path.display()
        ))
    }
}

/// The text of the lock file, trimmed.
fn contents(file: &mut File) -> String {
    let mut text = String::new();
    let _ = file.rewind().and_then(|_| file.read_to_string(&mut text));
    text.trim().to_string()
}

/// The holder's pid; it writes it just after locking, so wait for it briefly.
fn holder(file: &mut File) -> String {
    for _ in 0..100 {
        let pid = contents(file);
        if !pid.is_empty() {
            return pid;
        }
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
    "unknown".into()
}

/// Whether `path` still names the open `file`.
#[cfg(unix)]
fn same_file(file: &File, path: &Path) -> bool {
    use std::os::unix::fs::MetadataExt;
    match (file.metadata(), std::fs::metadata(path)) {
        (Ok(a), Ok(b)) => (a.dev(), a.ino()) == (b.dev(), b.ino()),
        _ => false,
    }
}

#[cfg(not(unix))]
fn same_file(_: &File, path: &Path) -> bool {
    path.exists()
}

impl Drop for Lock {
    fn drop(&mut self) {
        // Removed while still locked: a waiting sweep then sees a new file.
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
        // Left by a killed sweep: unlocked, so taken over.
        std::fs::write(dir.path().join(".lock"), "4294967295\n").unwrap();
        let _again = Lock::take(dir.path()).unwrap();
        let pid = std::fs::read_to_string(dir.path().join(".lock")).unwrap();
        assert_eq!(pid, format!("{}\n", std::process::id()));
    }
}
