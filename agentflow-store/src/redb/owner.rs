//! The owner's sidecar of a redb file: `<file>.owner`, a small JSON file a server writes beside
//! the store file it holds for its lifetime, naming itself ([`Owner`]: pid, program, the Unix
//! socket it answers on, since when).
//!
//! A redb file is open in one process at a time. When [`RedbStore::open`](crate::RedbStore::open)
//! finds the file held, it reads the sidecar, so that [`OpenError::AlreadyOpen`] names the
//! server instead of "another process"; the `agentflow` command-line tool reads it to reach the
//! server through its socket. A sidecar whose process is gone (killed before it could remove
//! it) is stale and [`read`] ignores it: the next server overwrites it.
//!
//! The sidecar is advisory: it says who holds the file, it grants nothing. [`read`] believes
//! only a sidecar owned by the store file's own owner (same uid), so another account that may
//! write in the directory cannot name a process or socket of its choosing. Reading never follows
//! a symbolic link at the sidecar's name and reads only a regular file, at most 64 KiB (a FIFO
//! planted there reads as no sidecar instead of blocking the reader). Writing creates a new file
//! under a random name (never following a symbolic link planted there) and renames it into
//! place.
//!
//! [`OpenError::AlreadyOpen`]: crate::OpenError::AlreadyOpen

use std::ffi::OsString;
use std::fs::{File, OpenOptions};
use std::hash::{BuildHasher, Hasher};
use std::io::{self, Read, Write};
#[cfg(unix)]
use std::os::unix::fs::{MetadataExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};

use serde::{Deserialize, Serialize};

/// The largest sidecar [`read`] reads; a real one is a few hundred bytes.
const MAX_SIDECAR: u64 = 64 * 1024;
/// Temporary names tried by [`write`] before giving up (each fails only if the name is taken).
const NAME_ATTEMPTS: u32 = 16;

/// The process that holds a redb file, as its sidecar says.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct Owner {
    /// Its process id.
    pub pid: u32,
    /// Its program's name (the server's executable, or the name it was given).
    pub program: String,
    /// The Unix socket it answers the `agentflow` tool on (HTTP), an absolute path.
    pub socket: PathBuf,
    /// Since when it holds the file, unix millis.
    pub since_ms: u64,
}

impl Owner {
    /// This process as the owner, answering on `socket`, since `since_ms`.
    pub fn new(program: impl Into<String>, socket: impl Into<PathBuf>, since_ms: u64) -> Self {
        Owner { pid: std::process::id(), program: program.into(), socket: socket.into(), since_ms }
    }

    /// For messages: ``"`server` (pid 4242; socket /srv/app.redb.sock)"``.
    pub fn describe(&self) -> String {
        format!("`{}` (pid {}; socket {})", self.program, self.pid, self.socket.display())
    }
}

/// Where the sidecar of store file `file` is: `<file>.owner`, beside it (beside the file a
/// symbolic link leads to, so that every path of the file finds the same sidecar).
pub fn sidecar_path(file: &Path) -> PathBuf {
    let file = std::fs::canonicalize(file).unwrap_or_else(|_| file.to_path_buf());
    with_suffix(&file, ".owner")
}

/// `file` with `suffix` appended to its last component (`app.redb` -> `app.redb.sock`).
pub fn with_suffix(file: &Path, suffix: &str) -> PathBuf {
    let mut name = OsString::from(file.as_os_str());
    name.push(suffix);
    PathBuf::from(name)
}

/// Writes the sidecar of `file`, replacing one there (a stale one): written whole under a
/// temporary name and renamed into place, so a reader never sees half of it. The temporary file
/// is created new (mode 0644 less the umask) under a random name, never through a symbolic link
/// planted there; a name that exists already is passed over for another.
///
/// # Errors
///
/// The temporary file cannot be created, written or renamed (the directory is not writable).
pub fn write(file: &Path, owner: &Owner) -> io::Result<()> {
    write_named(file, owner, random_name)
}

/// [`write`], with the temporary names `next_name` gives (a suffix after the sidecar's name).
fn write_named(file: &Path, owner: &Owner, mut next_name: impl FnMut() -> String) -> io::Result<()> {
    let target = sidecar_path(file);
    let text = serde_json::to_vec(owner).map_err(|e| io::Error::new(io::ErrorKind::InvalidInput, e))?;
    for _ in 0..NAME_ATTEMPTS {
        let temp = with_suffix(&target, &format!(".{}.tmp", next_name()));
        let mut options = OpenOptions::new();
        options.write(true).create_new(true);
        #[cfg(unix)]
        options.mode(0o644).custom_flags(libc::O_NOFOLLOW);
        let mut created = match options.open(&temp) {
            Ok(f) => f,
            // Taken (by anything, a symbolic link included: `create_new` does not follow one).
            Err(e) if e.kind() == io::ErrorKind::AlreadyExists => continue,
            Err(e) => return Err(e),
        };
        let written = created.write_all(&text).and_then(|()| std::fs::rename(&temp, &target));
        if written.is_err() {
            let _ = std::fs::remove_file(&temp);
        }
        return written;
    }
    Err(io::Error::new(
        io::ErrorKind::AlreadyExists,
        format!(
            "no free temporary name beside {} after {NAME_ATTEMPTS} tries; remove the `.tmp` files there",
            target.display()
        ),
    ))
}

/// A temporary name no one can guess: 16 hex digits from the standard library's randomly
/// keyed hasher (its keys come from the operating system), mixed with the pid, a counter and
/// the time.
fn random_name() -> String {
    static COUNTER: AtomicU64 = AtomicU64::new(0);
    let mut hasher = std::collections::hash_map::RandomState::new().build_hasher();
    hasher.write_u32(std::process::id());
    hasher.write_u64(COUNTER.fetch_add(1, Ordering::Relaxed));
    let nanos = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_nanos());
    hasher.write_u128(nanos);
    format!("{:016x}", hasher.finish())
}

/// Opens the sidecar at `path` for reading: not through a symbolic link, without blocking on a
/// FIFO, and only if it is a regular file; with its owner's uid (`None` where the system has
/// no uids).
fn open_sidecar(path: &Path) -> Option<(File, Option<u32>)> {
    let mut options = OpenOptions::new();
    options.read(true);
    #[cfg(unix)]
    options.custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK);
    let file = options.open(path).ok()?;
    let meta = file.metadata().ok()?;
    if !meta.file_type().is_file() || meta.len() > MAX_SIDECAR {
        return None;
    }
    #[cfg(unix)]
    let uid = Some(meta.uid());
    #[cfg(not(unix))]
    let uid = None;
    Some((file, uid))
}

/// The sidecar of `file` as written, and its owner's uid.
fn read_sidecar(file: &Path) -> Option<(Owner, Option<u32>)> {
    let (opened, uid) = open_sidecar(&sidecar_path(file))?;
    let mut text = Vec::new();
    opened.take(MAX_SIDECAR).read_to_end(&mut text).ok()?;
    Some((serde_json::from_slice(&text).ok()?, uid))
}

/// The sidecar of `file` as written, whether or not its process is alive and whoever owns it;
/// `None` when there is none, it is not a regular file (a symbolic link, a FIFO), or it does not
/// parse.
pub fn read_any(file: &Path) -> Option<Owner> {
    read_sidecar(file).map(|(owner, _)| owner)
}

/// The owner of `file`, if a live process left its sidecar and the sidecar belongs to the store
/// file's owner (the same uid): one whose process is gone is stale, and one of another account
/// is not believed; both answer `None`, as a missing or unreadable one does.
pub fn read(file: &Path) -> Option<Owner> {
    let (owner, uid) = read_sidecar(file)?;
    if uid.is_some() && uid != file_uid(file) {
        return None;
    }
    is_alive(owner.pid).then_some(owner)
}

/// The uid of the owner of store file `file` (following a symbolic link to it), if it exists.
pub fn file_uid(file: &Path) -> Option<u32> {
    #[cfg(unix)]
    {
        std::fs::metadata(file).ok().map(|m| m.uid())
    }
    #[cfg(not(unix))]
    {
        let _ = file;
        None
    }
}

/// Removes the sidecar of `file` if it is still `owner`'s (a server that started since keeps
/// its own); a missing sidecar is not an error. Answers whether it removed one.
///
/// # Errors
///
/// The sidecar is `owner`'s but cannot be removed.
pub fn remove(file: &Path, owner: &Owner) -> io::Result<bool> {
    if read_any(file).as_ref() != Some(owner) {
        return Ok(false);
    }
    match std::fs::remove_file(sidecar_path(file)) {
        Ok(()) => Ok(true),
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(false),
        Err(e) => Err(e),
    }
}

/// Whether process `pid` is alive. On Linux it has a `/proc/PID` entry; where there is no
/// `/proc` (other systems) every process counts as alive, so a stale sidecar there names a
/// gone process until the next server replaces it.
pub fn is_alive(pid: u32) -> bool {
    let proc = Path::new("/proc");
    if !proc.join("self").exists() {
        return true;
    }
    pid != 0 && proc.join(pid.to_string()).exists()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn dir(name: &str) -> PathBuf {
        let nanos = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_nanos());
        let dir = std::env::temp_dir().join(format!("agentflow-owner-{name}-{}-{nanos}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        dir
    }

    /// A pid no process has: past the kernel's largest (`pid_max` is at most 2^22).
    const GONE: u32 = 1 << 30;

    #[test]
    fn sidecar_round_trips_beside_the_file() {
        let dir = dir("round");
        let file = dir.join("app.redb");
        assert_eq!(sidecar_path(&file), dir.join("app.redb.owner"));
        assert_eq!(read(&file), None);
        let owner = Owner::new("server", dir.join("app.redb.sock"), 42);
        write(&file, &owner).unwrap();
        assert_eq!(read(&file), None, "a sidecar without its store file names no holder");
        std::fs::write(&file, b"").unwrap();
        assert_eq!(read(&file), Some(owner.clone()));
        let text = std::fs::read_to_string(sidecar_path(&file)).unwrap();
        let json: serde_json::Value = serde_json::from_str(&text).unwrap();
        assert_eq!(json["pid"], std::process::id());
        assert_eq!(json["program"], "server");
        assert_eq!(json["since_ms"], 42);
        assert!(owner.describe().contains(&format!("pid {}", std::process::id())), "{}", owner.describe());
        // No temporary file is left beside it.
        let mut names: Vec<_> = std::fs::read_dir(&dir).unwrap().map(|e| e.unwrap().file_name()).collect();
        names.sort();
        assert_eq!(names, vec![OsString::from("app.redb"), OsString::from("app.redb.owner")]);
        assert!(remove(&file, &owner).unwrap());
        assert_eq!(read_any(&file), None);
        assert!(!remove(&file, &owner).unwrap());
        std::fs::remove_dir_all(dir).unwrap();
    }

    #[test]
    fn a_dead_process_sidecar_is_stale() {
        if !Path::new("/proc/self").exists() {
            return;
        }
        let dir = dir("stale");
        let file = dir.join("app.redb");
        let mut owner = Owner::new("server", dir.join("app.redb.sock"), 1);
        owner.pid = GONE;
        write(&file, &owner).unwrap();
        assert_eq!(read(&file), None);
        assert_eq!(read_any(&file), Some(owner));
        assert!(is_alive(std::process::id()));
        assert!(!is_alive(GONE));
        std::fs::remove_dir_all(dir).unwrap();
    }

    #[test]
    fn a_held_file_names_its_server_and_a_stale_sidecar_names_none() {
        let dir = dir("held");
        let file = dir.join("app.redb");
        let held = crate::RedbStore::open(&file).unwrap();
        let already_open = || match crate::RedbStore::open(&file) {
            Err(crate::OpenError::AlreadyOpen { held_by, .. }) => held_by,
            other => panic!("expected AlreadyOpen, got {other:?}"),
        };
        assert_eq!(already_open(), None);
        let err = crate::RedbStore::open(&file).unwrap_err().to_string();
        assert!(err.contains("another process has this store open"), "{err}");

        let owner = Owner::new("billing-server", dir.join("app.redb.sock"), 7);
        write(&file, &owner).unwrap();
        assert_eq!(already_open(), Some(owner.describe()));
        let err = crate::RedbStore::open(&file).unwrap_err().to_string();
        assert!(err.contains("held by the agentflow server `billing-server`"), "{err}");
        assert!(err.contains(&format!("pid {}", std::process::id())), "{err}");
        assert!(
            err.contains("`agentflow pending`, `approve`, `reject` and `show` reach it through its socket"),
            "{err}"
        );
        assert!(err.contains("host this app in that server, or stop the server"), "{err}");

        if Path::new("/proc/self").exists() {
            let mut gone = owner;
            gone.pid = GONE;
            write(&file, &gone).unwrap();
            assert_eq!(already_open(), None);
        }
        drop(held);
        std::fs::remove_dir_all(dir).unwrap();
    }

    #[test]
    fn another_owner_sidecar_is_kept_and_garbage_is_none() {
        let dir = dir("other");
        let file = dir.join("app.redb");
        std::fs::write(&file, b"").unwrap();
        let mine = Owner::new("first", dir.join("a.sock"), 1);
        let theirs = Owner::new("second", dir.join("b.sock"), 2);
        write(&file, &theirs).unwrap();
        assert!(!remove(&file, &mine).unwrap());
        assert_eq!(read(&file), Some(theirs));
        std::fs::write(sidecar_path(&file), b"not json").unwrap();
        assert_eq!(read(&file), None);
        std::fs::remove_dir_all(dir).unwrap();
    }

    /// Runs `f` on a thread of its own; `None` if it has not returned within 10 s (it hangs).
    fn within_10s<T: Send + 'static>(f: impl FnOnce() -> T + Send + 'static) -> Option<T> {
        let (send, receive) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            let _ = send.send(f());
        });
        receive.recv_timeout(std::time::Duration::from_secs(10)).ok()
    }

    #[cfg(unix)]
    #[test]
    fn a_symbolic_link_planted_at_the_temporary_name_is_not_followed() {
        let dir = dir("planted");
        let file = dir.join("app.redb");
        std::fs::write(&file, b"").unwrap();
        let victim = dir.join("victim");
        std::fs::write(&victim, b"precious").unwrap();
        // Someone guessed the first temporary name and planted a link to the victim there.
        let planted = with_suffix(&sidecar_path(&file), ".guessed.tmp");
        std::os::unix::fs::symlink(&victim, &planted).unwrap();
        let mut names = ["guessed", "fresh"].into_iter();
        let owner = Owner::new("server", dir.join("app.redb.sock"), 3);
        write_named(&file, &owner, || names.next().unwrap_or("spare").to_string()).unwrap();
        assert_eq!(std::fs::read(&victim).unwrap(), b"precious", "the victim is untouched");
        assert!(std::fs::symlink_metadata(&planted).unwrap().file_type().is_symlink(), "the link is left as it was");
        assert_eq!(read(&file), Some(owner.clone()), "written under the next name");
        assert!(!with_suffix(&sidecar_path(&file), ".fresh.tmp").exists(), "renamed into place");
        // A link planted at the sidecar's own name is replaced, not written through.
        std::fs::remove_file(sidecar_path(&file)).unwrap();
        std::os::unix::fs::symlink(&victim, sidecar_path(&file)).unwrap();
        write(&file, &owner).unwrap();
        assert_eq!(std::fs::read(&victim).unwrap(), b"precious");
        assert!(std::fs::symlink_metadata(sidecar_path(&file)).unwrap().file_type().is_file());
        let mode =
            std::os::unix::fs::PermissionsExt::mode(&std::fs::metadata(sidecar_path(&file)).unwrap().permissions());
        assert_eq!(mode & 0o022, 0, "no one else may write it: {mode:o}");
        // Every name taken: refused, saying so.
        let err = write_named(&file, &owner, || "guessed".to_string()).unwrap_err();
        assert!(err.to_string().contains("no free temporary name"), "{err}");
        std::fs::remove_dir_all(dir).unwrap();
    }

    #[cfg(unix)]
    #[test]
    fn a_fifo_or_a_symbolic_link_at_the_sidecar_reads_as_none_without_hanging() {
        let dir = dir("fifo");
        let file = dir.join("app.redb");
        let held = crate::RedbStore::open(&file).unwrap();
        let fifo = std::ffi::CString::new(sidecar_path(&file).into_os_string().into_encoded_bytes()).unwrap();
        // SAFETY: `fifo` is a NUL-terminated path that outlives the call.
        assert_eq!(unsafe { libc::mkfifo(fifo.as_ptr(), 0o644) }, 0, "{}", io::Error::last_os_error());
        let reader = file.clone();
        let read_fifo = within_10s(move || (read(&reader), read_any(&reader)));
        assert_eq!(read_fifo, Some((None, None)), "a FIFO is no sidecar, and reading it does not block");
        let remover = file.clone();
        let removed = within_10s(move || remove(&remover, &Owner::new("server", "/nowhere", 1)).unwrap());
        assert_eq!(removed, Some(false), "a FIFO is not a sidecar to remove");
        // Opening the held store reads the sidecar too: `AlreadyOpen`, naming no holder.
        let path = file.clone();
        let second = within_10s(move || match crate::RedbStore::open(&path) {
            Err(crate::OpenError::AlreadyOpen { held_by, .. }) => held_by,
            other => panic!("expected AlreadyOpen, got {other:?}"),
        });
        assert_eq!(second, Some(None));
        drop(held);
        std::fs::remove_file(sidecar_path(&file)).unwrap();

        // A symbolic link to a real sidecar of a live process is not read through.
        let elsewhere = dir.join("elsewhere.owner");
        let owner = Owner::new("server", dir.join("app.redb.sock"), 5);
        std::fs::write(&elsewhere, serde_json::to_vec(&owner).unwrap()).unwrap();
        std::os::unix::fs::symlink(&elsewhere, sidecar_path(&file)).unwrap();
        assert_eq!(read(&file), None);
        assert_eq!(read_any(&file), None);
        // Nor a sidecar past 64 KiB.
        std::fs::remove_file(sidecar_path(&file)).unwrap();
        let mut big = serde_json::to_vec(&owner).unwrap();
        big.resize(MAX_SIDECAR as usize + 1, b' ');
        std::fs::write(sidecar_path(&file), big).unwrap();
        assert_eq!(read_any(&file), None);
        std::fs::remove_dir_all(dir).unwrap();
    }

    #[cfg(unix)]
    #[test]
    fn a_sidecar_of_another_account_than_the_files_is_not_believed() {
        let dir = dir("account");
        let file = dir.join("app.redb");
        std::fs::write(&file, b"").unwrap();
        let owner = Owner::new("server", dir.join("app.redb.sock"), 9);
        write(&file, &owner).unwrap();
        assert_eq!(read(&file), Some(owner.clone()));
        assert_eq!(file_uid(&file), Some(std::fs::metadata(sidecar_path(&file)).unwrap().uid()));
        // Only root can give a file away; as anyone else the store file is given away instead
        // (impossible too), so this part runs as root.
        // SAFETY: `geteuid` has no preconditions.
        if unsafe { libc::geteuid() } == 0 {
            std::os::unix::fs::chown(sidecar_path(&file), Some(4242), None).unwrap();
            assert_eq!(read(&file), None, "written by uid 4242, not by the store file's owner");
            assert_eq!(read_any(&file), Some(owner), "as written, for its own server's removal");
        }
        std::fs::remove_dir_all(dir).unwrap();
    }
}
