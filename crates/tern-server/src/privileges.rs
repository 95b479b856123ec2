//! Giving up root: after the listeners are bound and the logs opened, a
//! server started as root becomes `server.user` for good, before any
//! request is read; and a server that stays root runs no programs unless
//! told to (`cgi.allow_root`).

use std::ffi::CString;
use std::io;
use std::path::Path;

use rustix::fs::Access;

/// The account to become, looked up in the user and group databases.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Account {
    pub name: String,
    pub uid: u32,
    pub gid: u32,
}

/// Looks up `user` (and `group`, else the user's primary group). A name
/// may also be a number.
pub fn lookup(user: &str, group: &str) -> Result<Account, String> {
    let (uid, primary) = passwd(user)?;
    let gid = if group.is_empty() { primary } else { group_id(group)? };
    Ok(Account { name: user.to_string(), uid, gid })
}

fn passwd(user: &str) -> Result<(u32, u32), String> {
    let name = CString::new(user).map_err(|_| format!("`{user}` is not a user name"))?;
    let mut buf = vec![0u8; 16384];
    let mut pwd: libc::passwd = unsafe { std::mem::zeroed() };
    let mut found: *mut libc::passwd = std::ptr::null_mut();
    // SAFETY: every pointer is valid for the call; the strings it fills
    // point into `buf`, which outlives their (unused) use.
    let rc = unsafe { libc::getpwnam_r(name.as_ptr(), &mut pwd, buf.as_mut_ptr().cast(), buf.len(), &mut found) };
    if rc == 0 && !found.is_null() {
        return Ok((pwd.pw_uid, pwd.pw_gid));
    }
    match user.parse::<u32>() {
        Ok(uid) => {
            let mut found: *mut libc::passwd = std::ptr::null_mut();
            // SAFETY: as above.
            let rc = unsafe { libc::getpwuid_r(uid, &mut pwd, buf.as_mut_ptr().cast(), buf.len(), &mut found) };
            Ok((uid, if rc == 0 && !found.is_null() { pwd.pw_gid } else { uid }))
        }
        Err(_) => Err(format!("no user `{user}` on this system")),
    }
}

fn group_id(group: &str) -> Result<u32, String> {
    let name = CString::new(group).map_err(|_| format!("`{group}` is not a group name"))?;
    let mut buf = vec![0u8; 16384];
    let mut grp: libc::group = unsafe { std::mem::zeroed() };
    let mut found: *mut libc::group = std::ptr::null_mut();
    // SAFETY: as in `passwd`.
    let rc = unsafe { libc::getgrnam_r(name.as_ptr(), &mut grp, buf.as_mut_ptr().cast(), buf.len(), &mut found) };
    if rc == 0 && !found.is_null() {
        return Ok(grp.gr_gid);
    }
    group.parse().map_err(|_| format!("no group `{group}` on this system"))
}

/// Becomes `account` for good: supplementary groups (the user's, from
/// the group database), group, then user — each checked — then verifies
/// that root cannot be regained and sets `PR_SET_NO_NEW_PRIVS`, so no
/// program started later (a CGI) can gain privileges through a setuid file.
/// Already being that account (a reload) is not an error.
///
/// glibc applies these calls to every thread of the process.
pub fn become_user(account: &Account) -> io::Result<()> {
    let (uid, gid) = (rustix::process::getuid().as_raw(), rustix::process::getgid().as_raw());
    let euid = rustix::process::geteuid().as_raw();
    if uid == account.uid && euid == account.uid && gid == account.gid {
        return Ok(());
    }
    if euid != 0 {
        return Err(io::Error::new(
            io::ErrorKind::PermissionDenied,
            format!("only root can switch to another user (running as uid {euid})"),
        ));
    }
    let name = CString::new(account.name.as_str()).map_err(|e| io::Error::new(io::ErrorKind::InvalidInput, e))?;
    let check = |what: &str, rc: libc::c_int| {
        if rc == 0 {
            Ok(())
        } else {
            let e = io::Error::last_os_error();
            Err(io::Error::new(e.kind(), format!("{what}: {e}")))
        }
    };
    // SAFETY: plain system calls on integers and a valid C string.
    unsafe {
        check("setgroups", libc::initgroups(name.as_ptr(), account.gid as libc::gid_t))?;
        check("setgid", libc::setgid(account.gid))?;
        check("setuid", libc::setuid(account.uid))?;
    }
    // SAFETY: as above.
    let regained = unsafe { libc::setuid(0) } == 0;
    let now = (rustix::process::getuid().as_raw(), rustix::process::geteuid().as_raw());
    let gids = (rustix::process::getgid().as_raw(), rustix::process::getegid().as_raw());
    if regained || now != (account.uid, account.uid) || gids != (account.gid, account.gid) {
        return Err(io::Error::other("the switch did not hold (root could be regained)"));
    }
    // SAFETY: prctl with integer arguments.
    check("PR_SET_NO_NEW_PRIVS", unsafe { libc::prctl(libc::PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) })
}

/// Can the process, as it is now, list and enter `dir`?
pub fn may_read_dir(dir: &Path) -> io::Result<()> {
    rustix::fs::access(dir, Access::READ_OK | Access::EXEC_OK).map_err(io::Error::from)
}

/// Is the process root (so that a program it starts would be)?
pub fn is_root() -> bool {
    rustix::process::geteuid().is_root()
}

/// The log file paths among `specs` (not `-` for a standard stream nor
/// `off`), which are handed to the account so a reload can reopen them.
pub fn hand_over_logs(specs: &[&str], account: &Account) -> io::Result<()> {
    for spec in specs.iter().filter(|s| !matches!(**s, "-" | "off")) {
        std::os::unix::fs::chown(spec, Some(account.uid), Some(account.gid))
            .map_err(|e| io::Error::new(e.kind(), format!("cannot give {spec} to {}: {e}", account.name)))?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn accounts_by_name_or_number() {
        assert_eq!(lookup("root", ""), Ok(Account { name: "root".into(), uid: 0, gid: 0 }));
        assert_eq!(lookup("0", "").map(|a| (a.uid, a.gid)), Ok((0, 0)));
        assert_eq!(lookup("root", "1234").map(|a| a.gid), Ok(1234));
        assert_eq!(lookup("no-such-user-tern", ""), Err("no user `no-such-user-tern` on this system".into()));
        assert_eq!(lookup("root", "no-such-group-tern"), Err("no group `no-such-group-tern` on this system".into()));
    }
}
