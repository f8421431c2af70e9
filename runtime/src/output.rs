//! Every file a command writes goes through here: written under a temporary
//! name in its own directory, flushed, synced and renamed over the final
//! name, so a reader (or a killed run) sees the old file or the new one,
//! never part of one; a failure is an error naming the path and the OS
//! reason. Also the checks that keep outputs from destroying inputs, each
//! other, or a directory the command does not own.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};

/// The suffix of temporary files (a killed run may leave one behind; they
/// are ignored wherever a directory's contents are read).
pub const TEMP_SUFFIX: &str = ".kbtmp";

/// Whether `name` is one of this module's temporary files.
pub fn is_temp(name: &str) -> bool {
    name.starts_with('.') && name.ends_with(TEMP_SUFFIX)
}

/// A file being written: bytes go to a hidden temporary sibling of `path`;
/// [`AtomicFile::commit`] puts it in place. Dropped uncommitted, the
/// temporary file is removed and `path` is untouched. A path that exists
/// and is neither a file nor a directory (a device such as /dev/stdout, a
/// FIFO) is written in place, with every error still reported; a symlink
/// is followed, so its target is replaced, not the link.
#[derive(Debug)]
pub struct AtomicFile {
    /// The path asked for (named in errors).
    path: PathBuf,
    /// Where the file ends up: `path`, or its target if it is a symlink.
    target: PathBuf,
    /// The temporary file, None when writing in place.
    tmp: Option<PathBuf>,
    file: Option<std::fs::File>,
}

impl AtomicFile {
    /// Starts writing `path` (its directory must exist).
    pub fn create(path: &Path) -> Result<AtomicFile, String> {
        static NEXT: AtomicU64 = AtomicU64::new(0);
        let err = |e: std::io::Error| write_error(path, &e);
        let target = match std::fs::symlink_metadata(path) {
            Ok(m) if m.file_type().is_symlink() => path.canonicalize().unwrap_or(path.into()),
            _ => path.to_path_buf(),
        };
        let meta = std::fs::metadata(&target);
        if meta.as_ref().is_ok_and(|m| m.is_dir()) {
            return Err(err(std::io::ErrorKind::IsADirectory.into()));
        }
        if meta.is_ok_and(|m| !m.is_file()) {
            let file = std::fs::OpenOptions::new()
                .write(true)
                .open(&target)
                .map_err(err)?;
            return Ok(AtomicFile {
                path: path.to_path_buf(),
                target,
                tmp: None,
                file: Some(file),
            });
        }
        let name = target.file_name().unwrap_or_default().to_string_lossy();
        let k = NEXT.fetch_add(1, Ordering::Relaxed);
        let tmp = target.with_file_name(format!(".{name}.{}-{k}{TEMP_SUFFIX}", std::process::id()));
        let file = std::fs::File::create(&tmp).map_err(err)?;
        Ok(AtomicFile {
            path: path.to_path_buf(),
            target,
            tmp: Some(tmp),
            file: Some(file),
        })
    }

    /// Syncs the file and renames it over its final name.
    pub fn commit(mut self) -> Result<(), String> {
        let file = self.file.take().expect("an uncommitted file is open");
        let Some(tmp) = self.tmp.take() else {
            return Ok(());
        };
        let done = file
            .sync_all()
            .and_then(|_| std::fs::rename(&tmp, &self.target));
        if done.is_err() {
            let _ = std::fs::remove_file(&tmp);
        }
        done.map_err(|e| write_error(&self.path, &e))
    }
}

impl Write for AtomicFile {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.file.as_mut().expect("open until commit").write(buf)
    }

    fn flush(&mut self) -> std::io::Result<()> {
        self.file.as_mut().expect("open until commit").flush()
    }
}

impl Drop for AtomicFile {
    fn drop(&mut self) {
        if let Some(tmp) = &self.tmp {
            let _ = std::fs::remove_file(tmp);
        }
    }
}

/// The error of a failed write of `path`.
pub fn write_error(path: &Path, e: &std::io::Error) -> String {
    format!(
        "cannot write {}: {e}; free disk space, fix the permissions, or choose another output path",
        path.display()
    )
}

/// Writes `bytes` to `path` atomically (see the module doc).
pub fn write_file(path: &Path, bytes: &[u8]) -> Result<(), String> {
    let mut f = AtomicFile::create(path)?;
    f.write_all(bytes).map_err(|e| write_error(path, &e))?;
    f.commit()
}

/// Copies `from` to `to` through [`write_file`].
pub fn copy_file(from: &Path, to: &Path) -> Result<(), String> {
    let bytes = std::fs::read(from).map_err(|e| format!("cannot read {}: {e}", from.display()))?;
    write_file(to, &bytes)
}

/// `p` made absolute through its nearest existing ancestor (which is
/// canonicalized, symlinks resolved), the rest normalised (`.` dropped, `..`
/// applied): two spellings of one file compare equal, existing or not. A
/// path that cannot be resolved (e.g. /dev/stdout on a pipe) stays as given.
pub fn absolute(p: &Path) -> PathBuf {
    let mut rest: Vec<std::ffi::OsString> = Vec::new();
    let mut cur = if p.as_os_str().is_empty() {
        PathBuf::from(".")
    } else {
        p.to_path_buf()
    };
    loop {
        if cur.exists() {
            let Ok(mut abs) = cur.canonicalize() else {
                return p.to_path_buf();
            };
            for c in rest.iter().rev() {
                match c.to_str() {
                    Some("..") => {
                        abs.pop();
                    }
                    Some(".") => {}
                    _ => abs.push(c),
                }
            }
            return abs;
        }
        let last = cur.components().next_back();
        match (last, cur.parent()) {
            (Some(c), Some(parent)) => {
                rest.push(c.as_os_str().to_os_string());
                cur = if parent.as_os_str().is_empty() {
                    PathBuf::from(".")
                } else {
                    parent.to_path_buf()
                };
            }
            _ => return p.to_path_buf(),
        }
    }
}

/// Refuses an output path that is one of the inputs or another output
/// (compared after [`absolute`], so `./x`, `d/../x` and symlinks count):
/// `outputs` and `inputs` are (flag, path). Devices such as /dev/null are
/// written in place, never replaced, so any number of outputs may name
/// one. Run before any work.
pub fn check_distinct(outputs: &[(&str, &Path)], inputs: &[(&str, &Path)]) -> Result<(), String> {
    let is_device = |p: &Path| std::fs::metadata(p).is_ok_and(|m| !m.is_file() && !m.is_dir());
    let outputs: Vec<(&str, &Path)> = outputs
        .iter()
        .copied()
        .filter(|o| !is_device(o.1))
        .collect();
    let (outs, ins) = (resolved(&outputs), resolved(inputs));
    for (i, (flag, path, a)) in outs.iter().enumerate() {
        let clash = outs[..i]
            .iter()
            .map(|o| (o, "output"))
            .chain(ins.iter().map(|o| (o, "input")))
            .find(|((_, _, b), _)| a == b);
        if let Some(((other, other_path, _), role)) = clash {
            return Err(format!(
                "{flag} {} and {other} {} are the same file ({}): the {role} would be overwritten; allowed: an output path that is no input and no other output; choose another {flag}",
                path.display(),
                other_path.display(),
                a.display()
            ));
        }
    }
    Ok(())
}

/// Each (flag, path) with its path made [`absolute`].
fn resolved<'a>(list: &[(&'a str, &'a Path)]) -> Vec<(&'a str, &'a Path, PathBuf)> {
    list.iter()
        .map(|&(flag, p)| (flag, p, absolute(p)))
        .collect()
}

/// The file marking a directory as the output of one command (its name
/// inside): the command may write into it again.
pub const OWNER_FILE: &str = ".kernbench-output";

/// The entries of `dir` other than `own` names and temporary files, sorted
/// (empty if `dir` does not exist).
pub fn foreign_entries(dir: &Path, own: &[&str]) -> Result<Vec<String>, String> {
    let Ok(rd) = std::fs::read_dir(dir) else {
        return Ok(Vec::new());
    };
    let mut names = Vec::new();
    for entry in rd {
        let entry = entry.map_err(|e| format!("{}: {e}", dir.display()))?;
        let name = entry.file_name().to_string_lossy().into_owned();
        if !is_temp(&name) && !own.contains(&name.as_str()) {
            names.push(name);
        }
    }
    names.sort();
    Ok(names)
}

/// Names for a message: the first few of `names`, and how many more.
pub fn some_of(names: &[String]) -> String {
    let shown: Vec<&str> = names.iter().take(5).map(String::as_str).collect();
    match names.len() {
        n if n > 5 => format!("{} and {} more", shown.join(", "), n - 5),
        _ => shown.join(", "),
    }
}

/// Prepares `dir` for `command` (e.g. `gemm-sweep`), which writes a fixed
/// set of names into it: creates it if missing and marks it as the
/// command's own. A directory holding anything else — a user's files,
/// another command's output — is refused (naming `flag`, the directory and
/// what it holds), so nothing of the user's is overwritten.
pub fn claim_dir(flag: &str, dir: &Path, command: &str) -> Result<(), String> {
    let marker = dir.join(OWNER_FILE);
    let mine = format!("kernbench {command}\n");
    let held = foreign_entries(dir, &[])?;
    let owned = std::fs::read_to_string(&marker).is_ok_and(|t| t == mine);
    if !held.is_empty() && !owned {
        return Err(format!(
            "{flag} {}: the directory already holds files that are not the output of `kernbench {command}` ({}); they would be overwritten; allowed: an empty or new directory; choose another {flag}",
            dir.display(),
            some_of(&held)
        ));
    }
    std::fs::create_dir_all(dir).map_err(|e| {
        format!(
            "{flag} {}: cannot create the directory: {e}; allowed: a directory path that can be created",
            dir.display()
        )
    })?;
    write_file(&marker, mine.as_bytes())
}

/// Creates a new directory `parent/stem` (and `parent`): if another run
/// made that name already (two sweeps started in the same second), the
/// first free of `stem-2`, `stem-3`, …; `create_dir` fails on an existing
/// name, so two processes never get the same one.
pub fn new_dir(parent: &Path, stem: &str) -> Result<PathBuf, String> {
    std::fs::create_dir_all(parent)
        .map_err(|e| format!("cannot create {}: {e}", parent.display()))?;
    for n in 1..=1000 {
        let dir = match n {
            1 => parent.join(stem),
            n => parent.join(format!("{stem}-{n}")),
        };
        match std::fs::create_dir(&dir) {
            Ok(()) => return Ok(dir),
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => continue,
            Err(e) => return Err(format!("cannot create {}: {e}", dir.display())),
        }
    }
    Err(format!(
        "{}: {stem} and 999 numbered variants exist already; pass --out",
        parent.display()
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn two_directories_of_one_name_get_a_suffix() {
        let d = tempfile::tempdir().unwrap();
        let parent = d.path().join("results");
        let a = new_dir(&parent, "p-20260101-000000").unwrap();
        let b = new_dir(&parent, "p-20260101-000000").unwrap();
        assert_eq!(a, parent.join("p-20260101-000000"));
        assert_eq!(b, parent.join("p-20260101-000000-2"));
    }

    #[test]
    fn spellings_of_one_path_are_equal() {
        let d = tempfile::tempdir().unwrap();
        let file = d.path().join("f.yaml");
        std::fs::write(&file, "x").unwrap();
        let link = d.path().join("link.yaml");
        std::os::unix::fs::symlink(&file, &link).unwrap();
        std::fs::create_dir(d.path().join("sub")).unwrap();
        let abs = absolute(&file);
        assert_eq!(absolute(&link), abs);
        assert_eq!(absolute(&d.path().join("./sub/../f.yaml")), abs);
        assert_eq!(
            absolute(&d.path().join("new/./x/../f.csv")),
            abs.with_file_name("new").join("f.csv")
        );
        let null = Path::new("/dev/null");
        check_distinct(&[("--csv", null), ("--json", null)], &[]).unwrap();
        let e = check_distinct(&[("--csv", &link)], &[("--system", &file)]).unwrap_err();
        assert!(
            e.starts_with(&format!(
                "--csv {} and --system {} are the same file",
                link.display(),
                file.display()
            )),
            "{e}"
        );
    }

    #[test]
    fn a_failed_write_names_the_path_and_leaves_nothing() {
        let d = tempfile::tempdir().unwrap();
        // A directory in the way of the final name: the rename fails.
        let path = d.path().join("results.csv");
        std::fs::create_dir(&path).unwrap();
        let e = write_file(&path, b"a,b\n").unwrap_err();
        assert!(
            e.starts_with(&format!("cannot write {}: ", path.display())),
            "{e}"
        );
        assert_eq!(foreign_entries(d.path(), &[]).unwrap(), ["results.csv"]);
        let e = write_file(Path::new("/dev/full"), b"x").unwrap_err();
        assert!(
            e.starts_with("cannot write /dev/full: No space left on device"),
            "{e}"
        );
    }
}
