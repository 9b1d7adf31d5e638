//! Secrets kept as files in a directory: `file:NAME`, readable and writable.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};

use async_trait::async_trait;

use super::error::SecretError;
use super::exposed::Exposed;
use super::reference::SecretRef;
use super::store::SecretStore;

/// Keeps `file:NAME` in the file `NAME` of a directory. [`SecretStore::put`] writes the file
/// atomically (a temporary file, synced, then renamed) with mode 0600 on Unix, so a secret a
/// tool obtains at run time is kept here and only its reference enters the state. A read drops
/// one trailing newline (as `echo` writes).
#[derive(Debug, Clone)]
pub struct FileSecrets {
    dir: PathBuf,
}

/// Makes temporary file names unique within this process.
static TEMP: AtomicU64 = AtomicU64::new(0);

impl FileSecrets {
    /// The store over `dir`; the first [`put`](SecretStore::put) creates it (mode 0700) if it
    /// does not exist.
    pub fn new(dir: impl Into<PathBuf>) -> Self {
        FileSecrets { dir: dir.into() }
    }

    /// The directory.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    fn write(&self, reference: &SecretRef, value: &str) -> std::io::Result<()> {
        if !self.dir.is_dir() {
            // The first secret makes the directory, readable by this user only.
            let mut builder = std::fs::DirBuilder::new();
            builder.recursive(true);
            #[cfg(unix)]
            std::os::unix::fs::DirBuilderExt::mode(&mut builder, 0o700);
            builder.create(&self.dir)?;
        }
        let n = TEMP.fetch_add(1, Ordering::Relaxed);
        let temp = self.dir.join(format!(".{}.tmp-{}-{n}", reference.name(), std::process::id()));
        let mut options = std::fs::OpenOptions::new();
        options.write(true).create_new(true);
        #[cfg(unix)]
        std::os::unix::fs::OpenOptionsExt::mode(&mut options, 0o600);
        let written = options.open(&temp).and_then(|mut file| {
            file.write_all(value.as_bytes())?;
            file.sync_all()
        });
        let renamed = written.and_then(|()| std::fs::rename(&temp, self.dir.join(reference.name())));
        if renamed.is_err() {
            let _ = std::fs::remove_file(&temp);
        }
        renamed?;
        // The rename reaches the disk with the directory.
        #[cfg(unix)]
        std::fs::File::open(&self.dir)?.sync_all()?;
        Ok(())
    }
}

#[async_trait]
impl SecretStore for FileSecrets {
    async fn get(&self, reference: &SecretRef) -> Result<Exposed<String>, SecretError> {
        let path = self.dir.join(reference.name());
        match std::fs::read_to_string(&path) {
            Ok(mut text) => {
                if text.ends_with('\n') {
                    text.pop();
                    if text.ends_with('\r') {
                        text.pop();
                    }
                }
                Ok(Exposed::new(text))
            }
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Err(SecretError::Missing {
                reference: reference.to_string(),
                hint: format!("write it to the file `{}` in the secret directory", reference.name()),
            }),
            Err(source) => Err(SecretError::Io { reference: reference.to_string(), source }),
        }
    }

    async fn put(&self, name: &str, value: Exposed<String>) -> Result<SecretRef, SecretError> {
        let reference = SecretRef::new(self.scheme(), name)?;
        self.write(&reference, value.expose())
            .map_err(|source| SecretError::Io { reference: reference.to_string(), source })?;
        Ok(reference)
    }

    fn scheme(&self) -> &str {
        "file"
    }
}
