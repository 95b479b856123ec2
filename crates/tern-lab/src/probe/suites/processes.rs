//! Creating processes: fork+exit+wait, fork+execve of a tiny static program,
//! fork+`/bin/sh -c`, N children created then all waited for, posix_spawn.
//!
//! The tiny program is written by the probe itself: a 129-byte static ELF
//! whose only instructions are `exit(0)`, so execve costs what the kernel
//! costs and nothing of a dynamic loader or libc start-up.
//!
//! fork copies the parent's mappings and the page tables of its anonymous
//! memory, so a fork costs more from a larger parent: the suite reports the
//! probe process's own size beside its figures ([`Footprint`]), and
//! bench/probe.sh grows its C reference loop to that size before comparing.

use std::ffi::{CStr, CString};
use std::io;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::PermissionsExt;
use std::path::Path;

use crate::probe::ctx::{Ctx, Outcome};
use crate::probe::figure::Figure;
use crate::probe::stopwatch::Interval;

/// Where the program starts: the ELF header (64 bytes) and one program
/// header (56) come first in the file, which is mapped whole at `BASE`.
const BASE: u64 = 0x40_0000;
const CODE_OFFSET: u64 = 64 + 56;

/// The machine's `exit(0)`: (ELF machine number, instructions).
fn exit_code() -> Option<(u16, &'static [u8])> {
    if cfg!(target_arch = "x86_64") {
        // mov eax, 60 (exit); xor edi, edi; syscall
        Some((62, &[0xb8, 0x3c, 0, 0, 0, 0x31, 0xff, 0x0f, 0x05]))
    } else if cfg!(target_arch = "aarch64") {
        // mov x8, #93 (exit); mov x0, #0; svc #0
        Some((183, &[0xa8, 0x0b, 0x80, 0xd2, 0x00, 0x00, 0x80, 0xd2, 0x01, 0x00, 0x00, 0xd4]))
    } else {
        None
    }
}

/// The bytes of a static ELF executable that exits with status 0, for this
/// machine (`None` on architectures it is not written for).
pub fn tiny_program() -> Option<Vec<u8>> {
    let (machine, code) = exit_code()?;
    let size = CODE_OFFSET + code.len() as u64;
    let mut elf = Vec::with_capacity(size as usize);
    // e_ident: magic, 64-bit, little-endian, version 1, System V ABI, padding.
    elf.extend_from_slice(&[0x7f, b'E', b'L', b'F', 2, 1, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0]);
    elf.extend_from_slice(&2u16.to_le_bytes()); // e_type: executable
    elf.extend_from_slice(&machine.to_le_bytes());
    elf.extend_from_slice(&1u32.to_le_bytes()); // e_version
    elf.extend_from_slice(&(BASE + CODE_OFFSET).to_le_bytes()); // e_entry
    elf.extend_from_slice(&64u64.to_le_bytes()); // e_phoff
    elf.extend_from_slice(&0u64.to_le_bytes()); // e_shoff
    elf.extend_from_slice(&0u32.to_le_bytes()); // e_flags
    for half in [64u16, 56, 1, 64, 0, 0] {
        // e_ehsize, e_phentsize, e_phnum, e_shentsize, e_shnum, e_shstrndx
        elf.extend_from_slice(&half.to_le_bytes());
    }
    elf.extend_from_slice(&1u32.to_le_bytes()); // p_type: PT_LOAD
    elf.extend_from_slice(&5u32.to_le_bytes()); // p_flags: read + execute
    for word in [0, BASE, BASE, size, size, 0x1000] {
        // p_offset, p_vaddr, p_paddr, p_filesz, p_memsz, p_align
        elf.extend_from_slice(&word.to_le_bytes());
    }
    elf.extend_from_slice(code);
    Some(elf)
}

/// Writes the tiny program into `dir` as an executable file.
pub fn write_tiny_program(dir: &Path) -> io::Result<std::path::PathBuf> {
    let bytes =
        tiny_program().ok_or_else(|| io::Error::new(io::ErrorKind::Unsupported, "no tiny program for this CPU"))?;
    let path = dir.join(format!("tern-probe-exit0-{}", std::process::id()));
    std::fs::write(&path, bytes)?;
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755))?;
    Ok(path)
}

fn os(ret: libc::c_int) -> io::Result<libc::c_int> {
    if ret < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(ret)
    }
}

/// Waits for `pid` and checks it exited with status 0.
fn reap(pid: libc::pid_t) -> io::Result<()> {
    let mut status = 0;
    // SAFETY: waiting for our own child into a local.
    while unsafe { libc::waitpid(pid, &mut status, 0) } < 0 {
        let e = io::Error::last_os_error();
        if e.kind() != io::ErrorKind::Interrupted {
            return Err(e);
        }
    }
    if libc::WIFEXITED(status) && libc::WEXITSTATUS(status) == 0 {
        Ok(())
    } else {
        Err(io::Error::other(format!("child {pid} ended with status {status:#x}")))
    }
}

/// Forks a child that calls `exec` (when given; it must only make
/// async-signal-safe calls) or exits at once.
fn fork_child(exec: Option<&(CString, Vec<*const libc::c_char>)>) -> io::Result<libc::pid_t> {
    // SAFETY: the child only calls execve and _exit, both async-signal-safe,
    // on data prepared before the fork.
    unsafe {
        let pid = os(libc::fork())?;
        if pid == 0 {
            if let Some((path, argv)) = exec {
                let envp: [*const libc::c_char; 1] = [std::ptr::null()];
                libc::execve(path.as_ptr(), argv.as_ptr(), envp.as_ptr());
                libc::_exit(127);
            }
            libc::_exit(0);
        }
        Ok(pid)
    }
}

/// Path and NULL-terminated argv for execve; `args` must outlive the use.
fn exec_args(path: &CStr, args: &[CString]) -> (CString, Vec<*const libc::c_char>) {
    let mut argv: Vec<*const libc::c_char> = args.iter().map(|a| a.as_ptr()).collect();
    argv.push(std::ptr::null());
    (path.to_owned(), argv)
}

/// What a fork copies of this process: resident anonymous memory (its page
/// tables are copied), mappings, and threads (a fork from a multi-threaded
/// process takes libc's slower path).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Footprint {
    pub anon_kib: u64,
    pub mappings: u64,
    pub threads: u64,
}

impl Footprint {
    /// This process's, from /proc/self/status and /proc/self/maps.
    pub fn of_self() -> io::Result<Footprint> {
        let status = std::fs::read_to_string("/proc/self/status")?;
        let field = |name: &str| -> io::Result<u64> {
            status
                .lines()
                .find_map(|l| l.strip_prefix(name))
                .and_then(|v| v.split_whitespace().next()?.parse().ok())
                .ok_or_else(|| io::Error::other(format!("no {name} in /proc/self/status")))
        };
        let mappings = std::fs::read_to_string("/proc/self/maps")?.lines().count() as u64;
        Ok(Footprint { anon_kib: field("RssAnon:")?, mappings, threads: field("Threads:")? })
    }

    /// The note the suite reports (bench/probe.sh reads the numbers back).
    pub fn note(&self) -> String {
        format!(
            "forked from this process: {} KiB anonymous memory resident, {} mappings, {} threads (fork copies \
             the mappings and the anonymous memory's page tables: a larger parent forks slower)",
            self.anon_kib, self.mappings, self.threads
        )
    }
}

pub fn run(ctx: &Ctx) -> io::Result<Outcome> {
    let dir = super::scratch::tempdir(&ctx.opts.path)?;
    let footprint = Footprint::of_self()?;
    let figures = measure_all(ctx, dir.path())?;
    Ok(Outcome { figures, notes: vec![footprint.note()], rpc_null_ns: None })
}

fn measure_all(ctx: &Ctx, dir: &Path) -> io::Result<Vec<Figure>> {
    let tiny = write_tiny_program(dir)?;
    let tiny_c = CString::new(tiny.as_os_str().as_bytes())?;
    let tiny_args = [tiny_c.clone()];
    let tiny_exec = exec_args(&tiny_c, &tiny_args);
    let sh_args = [CString::new("sh")?, CString::new("-c")?, tiny_c.clone()];
    let sh_exec = exec_args(c"/bin/sh", &sh_args);

    let mut figures = Vec::new();
    figures.push(ctx.measure("fork+exit+wait", None, |n| Interval::looped(n, || reap(fork_child(None)?)))?);
    figures.push(ctx.measure("fork+execve (static exit(0))+wait", None, |n| {
        Interval::looped(n, || reap(fork_child(Some(&tiny_exec))?))
    })?);
    figures.push(ctx.measure("fork+/bin/sh -c (static exit(0))+wait", None, |n| {
        Interval::looped(n, || reap(fork_child(Some(&sh_exec))?))
    })?);
    figures.push(ctx.measure("posix_spawn (static exit(0))+wait", None, |n| {
        Interval::looped(n, || {
            let mut pid = 0;
            let envp: [*const libc::c_char; 1] = [std::ptr::null()];
            // SAFETY: argv and envp are NULL-terminated arrays of C strings
            // that outlive the call; default attributes and file actions.
            let rc = unsafe {
                libc::posix_spawn(
                    &mut pid,
                    tiny_c.as_ptr(),
                    std::ptr::null(),
                    std::ptr::null(),
                    tiny_exec.1.as_ptr() as *const *mut libc::c_char,
                    envp.as_ptr() as *const *mut libc::c_char,
                )
            };
            if rc != 0 {
                return Err(io::Error::from_raw_os_error(rc));
            }
            reap(pid)
        })
    })?);
    let batches: &[usize] = if ctx.opts.quick { &[1, 40] } else { &[1, 2, 5, 10, 20, 40] };
    for &n_children in batches {
        let mut pids = Vec::with_capacity(n_children);
        let mut f = ctx.measure(&format!("{n_children} children forked, then all waited, per child"), None, |n| {
            Interval::looped(n, || {
                pids.clear();
                for _ in 0..n_children {
                    pids.push(fork_child(None)?);
                }
                pids.iter().try_for_each(|&pid| reap(pid))
            })
        })?;
        f.per(n_children as u64);
        figures.push(f);
    }
    Ok(figures)
}

#[cfg(test)]
mod tests {
    use super::Footprint;

    #[test]
    fn the_footprint_grows_with_what_the_process_maps_and_writes() {
        let before = Footprint::of_self().unwrap();
        assert!(before.threads >= 1 && before.mappings > 5, "{before:?}");
        // Far more than the other tests of this process allocate or free
        // meanwhile.
        let mut m = super::super::scratch::Mapping::new(64 << 20, None).unwrap();
        m.bytes_mut().fill(1);
        let after = Footprint::of_self().unwrap();
        assert!(after.anon_kib >= before.anon_kib + 48 * 1024, "{before:?} -> {after:?}");
        assert!(
            after.note().starts_with(&format!(
                "forked from this process: {} KiB anonymous memory resident, {} mappings, {} threads",
                after.anon_kib, after.mappings, after.threads
            )),
            "{}",
            after.note()
        );
    }

    #[test]
    fn the_tiny_program_runs_and_exits_zero() {
        let dir = tempfile::tempdir().unwrap();
        let path = super::write_tiny_program(dir.path()).unwrap();
        assert!(std::fs::metadata(&path).unwrap().len() < 160);
        let status = std::process::Command::new(&path).status().unwrap();
        assert_eq!(status.code(), Some(0));
    }
}
