//! HTTP Basic authentication (RFC 7617) against an htpasswd file.
//!
//! Only the slow, salted hashes are accepted: bcrypt (`$2y$`, `$2b$`,
//! `$2a$`, as `htpasswd -B` writes) and SHA-crypt (`$5$`, `$6$`, as
//! `openssl passwd -6` writes). They cost milliseconds on purpose, so a
//! worker remembers the `Authorization` values it recently let in
//! ([`AuthCache`]): a client sending the same credentials again costs one
//! hash-map lookup and one constant-time comparison.
//!
//! The file is read at start ([`Htpasswd::open`]) and again when it changes:
//! each worker looks at it (`stat`) at most once a second, and a worker that
//! sees a change parses it and publishes the new user list with a new
//! generation; every worker's remembered values belong to a generation, so a
//! removed user or a changed password is refused from the reload on. A file
//! that became unreadable or invalid keeps the last good list and is logged
//! once. Between those looks the per-request path takes no lock and makes no
//! system call.

use std::collections::HashMap;
use std::fs::{File, Metadata};
use std::hash::{BuildHasher, RandomState};
use std::io::Read;
use std::num::NonZeroUsize;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, RwLock};
use std::time::{Duration, Instant};

use base64::engine::general_purpose::STANDARD as BASE64;
use base64::Engine;
use lru::LruCache;
use sha_crypt::{PasswordVerifier, ShaCrypt};
use subtle::ConstantTimeEq;

use crate::error_log::{log, Level};

/// How often a worker looks at the file.
const RECHECK: Duration = Duration::from_secs(1);

/// `Authorization` values a worker remembers as let in.
const REMEMBERED: usize = 256;

/// Longer `Authorization` values are checked every time, not remembered:
/// real credentials are short, and the bound keeps a worker's cache small.
const REMEMBERED_LEN: usize = 512;

const ADVICE: &str = "use bcrypt (htpasswd -B) or SHA-crypt (openssl passwd -6)";

/// One user's stored hash, checked for form when the file is read.
#[derive(Clone)]
enum Hash {
    Bcrypt(Box<str>),
    ShaCrypt(Box<str>),
}

impl Hash {
    fn parse(hash: &str) -> Result<Hash, String> {
        if ["$2y$", "$2b$", "$2a$"].iter().any(|p| hash.starts_with(p)) {
            return match hash.parse::<bcrypt::HashParts>() {
                Ok(parts) if (4..=31).contains(&parts.get_cost()) => Ok(Hash::Bcrypt(hash.into())),
                Ok(parts) => Err(format!("bcrypt cost {} is out of range (4 to 31)", parts.get_cost())),
                Err(err) => Err(format!("malformed bcrypt hash: {err}")),
            };
        }
        if let Some(rest) = hash.strip_prefix("$5$").or_else(|| hash.strip_prefix("$6$")) {
            let len = if hash.starts_with("$5$") { 43 } else { 86 };
            return check_sha_crypt(rest, len).map(|()| Hash::ShaCrypt(hash.into()));
        }
        let scheme = if hash.starts_with("$apr1$") {
            "$apr1$ (MD5)".to_string()
        } else if hash.starts_with("$1$") {
            "$1$ (MD5-crypt)".to_string()
        } else if hash.starts_with("{SHA}") {
            "{SHA} (unsalted SHA-1)".to_string()
        } else if let Some(id) = hash.strip_prefix('$').and_then(|h| h.split('$').next()) {
            format!("${id}$")
        } else if hash.len() == 13 && hash.bytes().all(is_crypt_char) {
            "DES crypt".to_string()
        } else {
            "plain-text or unknown".to_string()
        };
        Err(format!("{scheme} hashes are not accepted; {ADVICE}"))
    }

    /// Costs what the hash costs, whatever the outcome.
    fn verify(&self, password: &[u8]) -> bool {
        match self {
            Hash::Bcrypt(h) => bcrypt::verify(password, h).unwrap_or(false),
            Hash::ShaCrypt(h) => ShaCrypt::default().verify_password(password, &**h).is_ok(),
        }
    }
}

/// The characters of crypt's base-64 alphabet.
fn is_crypt_char(b: u8) -> bool {
    b.is_ascii_alphanumeric() || b == b'.' || b == b'/'
}

/// `[rounds=N$]salt$hash` after `$5$` or `$6$`, as glibc writes it.
fn check_sha_crypt(rest: &str, hash_len: usize) -> Result<(), String> {
    let mut fields: Vec<&str> = rest.split('$').collect();
    if let Some(rounds) = fields.first().and_then(|f| f.strip_prefix("rounds=")) {
        match rounds.parse::<u32>() {
            Ok(n) if (sha_crypt::Params::ROUNDS_MIN..=sha_crypt::Params::ROUNDS_MAX).contains(&n) => {}
            _ => return Err(format!("malformed SHA-crypt hash: rounds={rounds} (1000 to 999999999)")),
        }
        fields.remove(0);
    }
    match fields[..] {
        [salt, hash]
            if (1..=16).contains(&salt.len())
                && salt.bytes().all(is_crypt_char)
                && hash.len() == hash_len
                && hash.bytes().all(is_crypt_char) =>
        {
            Ok(())
        }
        _ => Err("malformed SHA-crypt hash".to_string()),
    }
}

/// One version of the file: its users and their hashes.
struct Users {
    by_name: HashMap<Arc<str>, Hash>,
    /// Checked in place of an unknown user's hash, so that an unknown name
    /// costs as long as a wrong password: timing tells no names.
    dummy: Option<Hash>,
}

impl Users {
    fn parse(text: &[u8]) -> Result<Users, String> {
        let mut by_name = HashMap::new();
        let mut dummy = None;
        for (n, line) in text.split(|&b| b == b'\n').enumerate() {
            let n = n + 1;
            let line = std::str::from_utf8(line).map_err(|_| format!("line {n}: not UTF-8"))?.trim();
            if line.is_empty() || line.starts_with('#') {
                continue;
            }
            // `user:hash`, or nginx's `user:hash:comment`.
            let mut fields = line.split(':');
            let user = fields.next().unwrap_or_default();
            let Some(hash) = fields.next() else {
                return Err(format!("line {n}: expected `user:hash`"));
            };
            if user.is_empty() {
                return Err(format!("line {n}: empty user name"));
            }
            let hash = Hash::parse(hash).map_err(|e| format!("line {n}: user `{user}`: {e}"))?;
            if by_name.contains_key(user) {
                return Err(format!("line {n}: user `{user}` is listed twice"));
            }
            if dummy.is_none() {
                dummy = Some(hash.clone());
            }
            by_name.insert(Arc::from(user), hash);
        }
        Ok(Users { by_name, dummy })
    }

    /// The user's name when `password` is theirs.
    fn verify(&self, user: &str, password: &[u8]) -> Option<Arc<str>> {
        match self.by_name.get_key_value(user) {
            Some((name, hash)) => hash.verify(password).then(|| name.clone()),
            None => {
                if let Some(dummy) = &self.dummy {
                    dummy.verify(password);
                }
                None
            }
        }
    }
}

/// What the file was when last looked at: a change in any of these means
/// it is read again (the change time too, which no one can set back).
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Seen {
    File {
        dev: u64,
        ino: u64,
        size: u64,
        mtime: (i64, i64),
        ctime: (i64, i64),
    },
    /// `stat` failed with this OS error.
    Unreadable(Option<i32>),
}

impl Seen {
    fn of(meta: &Metadata) -> Seen {
        Seen::File {
            dev: meta.dev(),
            ino: meta.ino(),
            size: meta.size(),
            mtime: (meta.mtime(), meta.mtime_nsec()),
            ctime: (meta.ctime(), meta.ctime_nsec()),
        }
    }

    fn look(path: &Path) -> Seen {
        std::fs::metadata(path).map_or_else(|e| Seen::Unreadable(e.raw_os_error()), |m| Seen::of(&m))
    }
}

/// The version every worker uses.
struct Current {
    users: Arc<Users>,
    /// Changes with `users`: what a worker's remembered values belong to.
    generation: u64,
    /// The file as last looked at, read well or not: an unchanged file is
    /// neither read nor logged again.
    seen: Seen,
}

/// An htpasswd file, shared by the workers.
pub struct Htpasswd {
    path: PathBuf,
    /// Tells this file from the others in a worker's [`AuthCache`].
    id: u64,
    current: RwLock<Current>,
    /// Whether workers remember the credentials they let in (else every
    /// request is hashed, as nginx does).
    remember: bool,
}

/// Gives each [`Htpasswd`] its id.
static NEXT_ID: AtomicU64 = AtomicU64::new(0);

impl Htpasswd {
    /// Reads and checks the file: at start, and for `tern --check`.
    pub fn open(path: &Path) -> Result<Htpasswd, String> {
        let (seen, users) = read(path)?;
        Ok(Htpasswd {
            path: path.to_path_buf(),
            id: NEXT_ID.fetch_add(1, Ordering::Relaxed),
            current: RwLock::new(Current { users: Arc::new(users), generation: 0, seen }),
            remember: true,
        })
    }

    /// The same file, checked on every request when `remember` is false.
    pub fn remembering(self, remember: bool) -> Htpasswd {
        Htpasswd { remember, ..self }
    }

    /// Looks at the file and, when it changed, reads it again; returns the
    /// version to use from now on.
    fn refresh(&self) -> (u64, Arc<Users>) {
        let seen = Seen::look(&self.path);
        {
            let c = self.current.read().unwrap_or_else(|e| e.into_inner());
            if c.seen == seen {
                return (c.generation, c.users.clone());
            }
        }
        // Read under the lock, one worker after another: a slow reader
        // never publishes an older file over a newer one.
        let mut c = self.current.write().unwrap_or_else(|e| e.into_inner());
        if c.seen != seen {
            match read(&self.path) {
                // Another worker read this very file since.
                Ok((read_seen, _)) if read_seen == c.seen => {}
                Ok((read_seen, users)) => {
                    log!(Level::Info, "{}: read again, {} users", self.path.display(), users.by_name.len());
                    c.users = Arc::new(users);
                    c.generation += 1;
                    c.seen = read_seen;
                }
                Err(err) => {
                    log!(Level::Warn, "{err}; the users read before are kept");
                    c.seen = seen;
                }
            }
        }
        (c.generation, c.users.clone())
    }
}

/// Reads and parses the file, with what `fstat` says of the very file read.
fn read(path: &Path) -> Result<(Seen, Users), String> {
    let cannot = |e: std::io::Error| format!("cannot read {}: {e}", path.display());
    let mut file = File::open(path).map_err(cannot)?;
    let seen = Seen::of(&file.metadata().map_err(cannot)?);
    let mut text = Vec::new();
    file.read_to_end(&mut text).map_err(cannot)?;
    let users = Users::parse(&text).map_err(|e| format!("{}: {e}", path.display()))?;
    Ok((seen, users))
}

/// A worker's view of one file.
struct Slot {
    id: u64,
    /// When the worker last looked at the file.
    looked: Instant,
    generation: u64,
    users: Arc<Users>,
}

/// A remembered `Authorization` value, compared in full (constant time)
/// after its digest matched.
struct Remembered {
    header: Box<[u8]>,
    user: Arc<str>,
}

/// A worker's own state for authentication: its view of each file and the
/// credentials it recently let in. Owned by one worker, so nothing here is
/// locked.
pub struct AuthCache {
    /// One per file this worker has checked against; few, so a list.
    files: Vec<Slot>,
    /// Keyed by (file id, generation, digest of the `Authorization` value).
    recent: LruCache<(u64, u64, u64), Remembered>,
    /// Keyed per worker, so no one outside can aim at a digest.
    digest: RandomState,
    hashes: u64,
}

impl Default for AuthCache {
    fn default() -> AuthCache {
        AuthCache {
            files: Vec::new(),
            recent: LruCache::new(NonZeroUsize::new(REMEMBERED).expect("not zero")),
            digest: RandomState::new(),
            hashes: 0,
        }
    }
}

impl AuthCache {
    /// The user the `Authorization` value `header` lets in, checked against
    /// `file` (looked at again when a second has passed since this worker
    /// last did, `now` being the worker's clock); `None`: answer `401` with
    /// [`challenge`].
    pub fn check(&mut self, file: &Htpasswd, header: Option<&[u8]>, now: Instant) -> Option<Arc<str>> {
        let header = header?;
        let slot = match self.files.iter().position(|s| s.id == file.id) {
            Some(i) => &mut self.files[i],
            None => {
                let (generation, users) = file.refresh();
                self.files.push(Slot { id: file.id, looked: now, generation, users });
                self.files.last_mut().expect("just pushed")
            }
        };
        if now.saturating_duration_since(slot.looked) >= RECHECK {
            (slot.generation, slot.users) = file.refresh();
            slot.looked = now;
        }
        let key = (file.id, slot.generation, self.digest.hash_one(header));
        if let Some(r) = self.recent.get(&key).filter(|_| file.remember) {
            if bool::from(r.header.ct_eq(header)) {
                return Some(r.user.clone());
            }
        }
        let (decoded, colon) = basic(header)?;
        let user = std::str::from_utf8(&decoded[..colon]).ok()?;
        self.hashes += 1;
        let name = slot.users.verify(user, &decoded[colon + 1..])?;
        if file.remember && header.len() <= REMEMBERED_LEN {
            self.recent.put(key, Remembered { header: header.into(), user: name.clone() });
        }
        Some(name)
    }

    /// Password hashes computed so far (the cache's misses).
    #[cfg(test)]
    fn hashes(&self) -> u64 {
        self.hashes
    }
}

/// The decoded `user:password` of a `Basic` value and the place of its
/// first colon; `None` for another scheme or anything malformed.
fn basic(header: &[u8]) -> Option<(Vec<u8>, usize)> {
    let value = header.trim_ascii();
    let space = value.iter().position(|&b| b == b' ')?;
    if !value[..space].eq_ignore_ascii_case(b"basic") {
        return None;
    }
    let token = value[space..].trim_ascii_start();
    let decoded = BASE64.decode(token).ok()?;
    let colon = decoded.iter().position(|&b| b == b':')?;
    Some((decoded, colon))
}

/// The `WWW-Authenticate` value of a `401` for `realm`; an error for a realm
/// that cannot stand in a header (control characters).
pub fn challenge(realm: &str) -> Result<String, String> {
    if realm.chars().any(char::is_control) {
        return Err(format!("realm {realm:?} holds a control character"));
    }
    let mut value = String::from("Basic realm=\"");
    for c in realm.chars() {
        if c == '"' || c == '\\' {
            value.push('\\');
        }
        value.push(c);
    }
    value.push_str("\", charset=\"UTF-8\"");
    Ok(value)
}

#[cfg(test)]
mod tests {
    use super::*;
    use sha_crypt::{Algorithm, Params, PasswordHasher};

    /// `htpasswd -nbB -C 5 alice 'open sesame'`.
    const HTPASSWD_B: &str = "alice:$2y$05$r8RDq76W82ELYO.1oBwVVOp.Za/tBQSKr.wY6fuSCFo/hZmtXEEMm";
    /// `openssl passwd -6 -salt saltsalt 'correct horse'`.
    const OPENSSL_6: &str =
        "$6$saltsalt$hRM5XZ86KXEw9UOmjigeVqFgULtFB2sgpC9lXQDfMib3Zgw7mEiUvBJI2EplzfAqxL5Vvwp2scFtv/uamSo5z0";
    /// `openssl passwd -5 -salt abc 'pw:with:colons'`.
    const OPENSSL_5: &str = "$5$abc$RGXxi4CjooAWiXX4tNd5lhcYtHs4.iTmzJh3fNYFvGA";

    fn authorization(user: &str, password: &str) -> Vec<u8> {
        format!("Basic {}", BASE64.encode(format!("{user}:{password}"))).into_bytes()
    }

    fn file(text: &str) -> (tempfile::NamedTempFile, Htpasswd) {
        let f = tempfile::NamedTempFile::new().unwrap();
        std::fs::write(f.path(), text).unwrap();
        let h = Htpasswd::open(f.path()).unwrap();
        (f, h)
    }

    fn check(cache: &mut AuthCache, h: &Htpasswd, user: &str, password: &str, now: Instant) -> Option<String> {
        cache.check(h, Some(&authorization(user, password)), now).map(|u| u.to_string())
    }

    #[test]
    fn fixed_vectors_from_htpasswd_and_openssl() {
        let text = format!("# users\n\n{HTPASSWD_B}\r\ncarol:{OPENSSL_6}\n  dave:{OPENSSL_5}:nginx comment\n");
        let (_f, h) = file(&text);
        let mut c = AuthCache::default();
        let now = Instant::now();
        assert_eq!(check(&mut c, &h, "alice", "open sesame", now).as_deref(), Some("alice"));
        assert_eq!(check(&mut c, &h, "alice", "open sesame!", now), None);
        assert_eq!(check(&mut c, &h, "carol", "correct horse", now).as_deref(), Some("carol"));
        assert_eq!(check(&mut c, &h, "carol", "correct horsE", now), None);
        assert_eq!(check(&mut c, &h, "dave", "pw:with:colons", now).as_deref(), Some("dave"));
        assert_eq!(check(&mut c, &h, "dave", "pw", now), None);
    }

    #[test]
    fn hashes_made_by_the_crates() {
        let b = bcrypt::hash("s3cret", 4).unwrap();
        let b2b = bcrypt::hash_with_result("other", 4).unwrap().format_for_version(bcrypt::Version::TwoB);
        let s5 = ShaCrypt::new(Algorithm::Sha256Crypt, Params::new(1000).unwrap())
            .hash_password_with_salt(b"five", b"0123456789ab")
            .unwrap();
        let s6 = ShaCrypt::default().hash_password_with_salt(b"\xffsix", b"salt").unwrap();
        let text = format!("b:{b}\nb2b:{b2b}\ns5:{s5}\ns6:{s6}\n");
        assert!(text.contains("$2b$") && text.contains("$5$rounds=1000$") && text.contains("$6$"), "{text}");
        let (_f, h) = file(&text);
        let mut c = AuthCache::default();
        let now = Instant::now();
        assert_eq!(check(&mut c, &h, "b", "s3cret", now).as_deref(), Some("b"));
        assert_eq!(check(&mut c, &h, "b2b", "other", now).as_deref(), Some("b2b"));
        assert_eq!(check(&mut c, &h, "s5", "five", now).as_deref(), Some("s5"));
        assert_eq!(check(&mut c, &h, "s5", "Five", now), None);
        let mut raw = b"s6:".to_vec();
        raw.extend_from_slice(b"\xffsix");
        let header = format!("Basic {}", BASE64.encode(&raw));
        assert_eq!(c.check(&h, Some(header.as_bytes()), now).as_deref(), Some("s6"));
    }

    #[test]
    fn unknown_users_cost_a_hash_and_are_refused() {
        let (_f, h) = file(HTPASSWD_B);
        let mut c = AuthCache::default();
        let now = Instant::now();
        assert_eq!(check(&mut c, &h, "mallory", "open sesame", now), None);
        assert_eq!(c.hashes(), 1);
        assert_eq!(check(&mut c, &h, "Alice", "open sesame", now), None, "names are case-sensitive");
        assert_eq!(c.check(&h, None, now), None);
    }

    #[test]
    fn an_unknown_name_takes_as_long_as_a_wrong_password() {
        let users = Users::parse(format!("u:{}\n", bcrypt::hash("p", 8).unwrap()).as_bytes()).unwrap();
        // The fastest of five: a busy machine only ever adds time.
        let time = |user: &str| {
            (0..5)
                .map(|_| {
                    let t = Instant::now();
                    assert_eq!(users.verify(user, b"wrong"), None);
                    t.elapsed()
                })
                .min()
                .unwrap()
        };
        let (known, unknown) = (time("u"), time("nobody"));
        assert!(unknown * 4 > known, "wrong password {known:?}, unknown user {unknown:?}");
    }

    #[test]
    fn malformed_headers_are_refused_without_panic() {
        let (_f, h) = file(HTPASSWD_B);
        let mut c = AuthCache::default();
        let now = Instant::now();
        let good = BASE64.encode("alice:open sesame");
        for ok in [format!("Basic {good}"), format!("basic  {good}"), format!("BASIC {good} ")] {
            assert_eq!(c.check(&h, Some(ok.as_bytes()), now).as_deref(), Some("alice"), "{ok}");
        }
        let unpadded = good.trim_end_matches('=').to_string();
        assert_ne!(unpadded, good);
        let no_colon = BASE64.encode("alice");
        let bad_utf8 = BASE64.encode(b"\xff\xfe:open sesame");
        for bad in [
            String::new(),
            "Basic".to_string(),
            "Basic ".to_string(),
            format!("Bearer {good}"),
            format!("Basic{good}"),
            format!("Basic {unpadded}"),
            format!("Basic {no_colon}"),
            format!("Basic {bad_utf8}"),
            format!("Basic {good}x"),
            "Basic !!!!".to_string(),
            "Basic ====".to_string(),
        ] {
            assert_eq!(c.check(&h, Some(bad.as_bytes()), now), None, "{bad:?}");
        }
        assert_eq!(c.check(&h, Some(b"Basic \xff\xff"), now), None);
    }

    #[test]
    fn a_remembered_value_costs_no_hash() {
        let (_f, h) = file(HTPASSWD_B);
        let mut c = AuthCache::default();
        let now = Instant::now();
        for _ in 0..3 {
            assert_eq!(check(&mut c, &h, "alice", "open sesame", now).as_deref(), Some("alice"));
        }
        assert_eq!(c.hashes(), 1);
        // A wrong password is never remembered: every try costs a hash.
        for _ in 0..2 {
            assert_eq!(check(&mut c, &h, "alice", "guess", now), None);
        }
        assert_eq!(c.hashes(), 3);
        // Another spelling of the same credentials is another value.
        let other = format!("basic {}", BASE64.encode("alice:open sesame"));
        assert!(c.check(&h, Some(other.as_bytes()), now).is_some());
        assert_eq!(c.hashes(), 4);
    }

    #[test]
    fn a_changed_file_is_read_again_and_forgets_what_was_let_in() {
        let bob = bcrypt::hash("bob's", 4).unwrap();
        let (f, h) = file(&format!("{HTPASSWD_B}\nbob:{bob}\n"));
        let mut c = AuthCache::default();
        let t0 = Instant::now();
        assert!(check(&mut c, &h, "alice", "open sesame", t0).is_some());
        assert!(check(&mut c, &h, "bob", "bob's", t0).is_some());
        assert_eq!(c.hashes(), 2);

        // Bob's password changes and Alice is removed.
        let bob2 = bcrypt::hash("new", 4).unwrap();
        std::fs::write(f.path(), format!("bob:{bob2}\n")).unwrap();
        // Within the second the worker does not look.
        assert!(check(&mut c, &h, "alice", "open sesame", t0 + Duration::from_millis(500)).is_some());
        assert_eq!(c.hashes(), 2);
        let t1 = t0 + Duration::from_secs(1);
        assert_eq!(check(&mut c, &h, "alice", "open sesame", t1), None);
        assert_eq!(check(&mut c, &h, "bob", "bob's", t1), None);
        assert_eq!(check(&mut c, &h, "bob", "new", t1).as_deref(), Some("bob"));
        assert_eq!(c.hashes(), 5);

        // Another worker sees the same generation.
        let mut other = AuthCache::default();
        assert_eq!(check(&mut other, &h, "bob", "new", t1).as_deref(), Some("bob"));
        assert_eq!(check(&mut other, &h, "alice", "open sesame", t1), None);

        // Invalid, then gone: the last good list stays.
        std::fs::write(f.path(), "bob:$apr1$xwrtoxw2$QPe5fjhrFR0N0q3MaVoZZ/\n").unwrap();
        let t2 = t1 + Duration::from_secs(1);
        assert_eq!(check(&mut c, &h, "bob", "new", t2).as_deref(), Some("bob"));
        let generation = h.current.read().unwrap().generation;
        std::fs::remove_file(f.path()).unwrap();
        let t3 = t2 + Duration::from_secs(1);
        assert_eq!(check(&mut c, &h, "bob", "new", t3).as_deref(), Some("bob"));
        assert_eq!(h.current.read().unwrap().generation, generation);
        assert_eq!(c.hashes(), 5, "no new generation, the remembered value still holds");

        // Back, valid: read again.
        std::fs::write(f.path(), HTPASSWD_B).unwrap();
        let t4 = t3 + Duration::from_secs(1);
        assert_eq!(check(&mut c, &h, "bob", "new", t4), None);
        assert_eq!(check(&mut c, &h, "alice", "open sesame", t4).as_deref(), Some("alice"));
    }

    #[test]
    fn two_files_are_kept_apart() {
        let (_f1, h1) = file(HTPASSWD_B);
        let (_f2, h2) = file(&format!("bob:{}\n", bcrypt::hash("b", 4).unwrap()));
        let mut c = AuthCache::default();
        let now = Instant::now();
        assert!(check(&mut c, &h1, "alice", "open sesame", now).is_some());
        assert_eq!(check(&mut c, &h2, "alice", "open sesame", now), None);
        assert!(check(&mut c, &h2, "bob", "b", now).is_some());
        assert_eq!(check(&mut c, &h1, "bob", "b", now), None);
    }

    #[test]
    fn file_errors_name_the_line_and_the_scheme() {
        let parse = |text: &str| Users::parse(text.as_bytes()).err().unwrap_or_default();
        assert_eq!(
            parse("# x\nalice:$2y$05$r8RDq76W82ELYO.1oBwVVOp.Za/tBQSKr.wY6fuSCFo/hZmtXEEMm\nbob:$apr1$xwrtoxw2$QPe5fjhrFR0N0q3MaVoZZ/"),
            "line 3: user `bob`: $apr1$ (MD5) hashes are not accepted; use bcrypt (htpasswd -B) or SHA-crypt (openssl passwd -6)"
        );
        for (text, wanted) in [
            ("u:{SHA}W6ph5Mm5Pz8GgiULbPgzG37mj9g=", "line 1: user `u`: {SHA} (unsalted SHA-1) hashes"),
            ("u:$1$abc$def", "line 1: user `u`: $1$ (MD5-crypt) hashes"),
            ("u:$y$j9T$abc$def", "line 1: user `u`: $y$ hashes"),
            ("u:rl0uE2PRqbj3.", "line 1: user `u`: DES crypt hashes"),
            ("u:secret", "line 1: user `u`: plain-text or unknown hashes"),
            ("u:", "line 1: user `u`: plain-text or unknown hashes"),
            ("u:$2x$05$r8RDq76W82ELYO.1oBwVVOp.Za/tBQSKr.wY6fuSCFo/hZmtXEEMm", "line 1: user `u`: $2x$ hashes"),
            ("u:$2y$05$short", "line 1: user `u`: malformed bcrypt hash"),
            ("u:$2y$99$r8RDq76W82ELYO.1oBwVVOp.Za/tBQSKr.wY6fuSCFo/hZmtXEEMm", "line 1: user `u`: bcrypt cost 99"),
            ("u:$6$salt$short", "line 1: user `u`: malformed SHA-crypt hash"),
            ("u:$5$rounds=10$abc$RGXxi4CjooAWiXX4tNd5lhcYtHs4.iTmzJh3fNYFvGA", "rounds=10"),
            ("u:$5$0123456789abcdefX$RGXxi4CjooAWiXX4tNd5lhcYtHs4.iTmzJh3fNYFvGA", "malformed SHA-crypt"),
            ("\n\nnocolon", "line 3: expected `user:hash`"),
            (":$5$abc$RGXxi4CjooAWiXX4tNd5lhcYtHs4.iTmzJh3fNYFvGA", "line 1: empty user name"),
            (&format!("{HTPASSWD_B}\n{HTPASSWD_B}"), "line 2: user `alice` is listed twice"),
        ] {
            let err = parse(text);
            assert!(err.starts_with(wanted) || err.contains(wanted), "{text:?}: {err}");
        }
        assert_eq!(Users::parse(b"u:\xff").err().unwrap(), "line 1: not UTF-8");
        assert_eq!(Users::parse(b"").unwrap().by_name.len(), 0);
    }

    #[test]
    fn open_names_the_path() {
        let err = Htpasswd::open(Path::new("/nonexistent/users")).err().unwrap();
        assert_eq!(err, "cannot read /nonexistent/users: No such file or directory (os error 2)");
        let f = tempfile::NamedTempFile::new().unwrap();
        std::fs::write(f.path(), "u:plain\n").unwrap();
        let err = Htpasswd::open(f.path()).err().unwrap();
        assert!(err.starts_with(&format!("{}: line 1: user `u`: plain-text", f.path().display())), "{err}");
    }

    #[test]
    fn challenge_quotes_the_realm() {
        assert_eq!(challenge("Private").unwrap(), r#"Basic realm="Private", charset="UTF-8""#);
        assert_eq!(challenge(r#"a "b" \c é"#).unwrap(), r#"Basic realm="a \"b\" \\c é", charset="UTF-8""#);
        assert!(challenge("a\r\nSet-Cookie: x").is_err());
        assert!(challenge("a\0").is_err());
    }
}
