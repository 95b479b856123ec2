//! A private php-fpm for a test (FastCGI over HTTP/1.1 and HTTP/2): its
//! own configuration and Unix socket in the test's directory, no system
//! service.

use std::net::TcpStream;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// The php-fpm binary Debian's `php-fpm` package installs.
pub fn php_fpm_bin() -> PathBuf {
    let mut found: Vec<PathBuf> = std::fs::read_dir("/usr/sbin")
        .unwrap()
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.file_name().and_then(|n| n.to_str()).is_some_and(|n| n.starts_with("php-fpm")))
        .collect();
    found.sort();
    found.pop().expect("php-fpm is installed (scripts/ensure-packages.sh php-fpm)")
}

/// A php-fpm master with its children, in its own process group; killed
/// (the whole group) when dropped.
pub struct PhpFpm {
    child: Option<Child>,
    dir: PathBuf,
    pub socket: PathBuf,
    /// Set when it listens on TCP instead of `socket`.
    port: Option<u16>,
    pool: String,
}

impl PhpFpm {
    /// Starts php-fpm on `dir/fpm.sock` with `children` static children and
    /// extra pool settings.
    pub fn start(dir: &Path, children: usize, extra: &str) -> PhpFpm {
        PhpFpm::start_on(dir, None, children, extra)
    }

    /// As [`PhpFpm::start`], listening on `127.0.0.1:port` when given.
    pub fn start_on(dir: &Path, port: Option<u16>, children: usize, extra: &str) -> PhpFpm {
        let socket = dir.join("fpm.sock");
        let listen = port.map_or_else(|| socket.display().to_string(), |p| format!("127.0.0.1:{p}"));
        let pool = format!(
            "[tern]\nlisten = {listen}\npm = static\npm.max_children = {children}\ncatch_workers_output = yes\n\
             php_admin_value[output_buffering] = 0\nphp_admin_value[post_max_size] = 64M\n\
             php_admin_value[upload_max_filesize] = 64M\nphp_admin_value[display_errors] = Off\n\
             php_admin_value[error_log] =\nphp_admin_flag[log_errors] = on\n{extra}\n"
        );
        let mut fpm = PhpFpm { child: None, dir: dir.to_path_buf(), socket, port, pool };
        fpm.launch();
        fpm
    }

    pub fn launch(&mut self) {
        let conf = self.dir.join("fpm.conf");
        let text = format!(
            "[global]\nerror_log = {}\ndaemonize = no\npid = {}\n{}",
            self.dir.join("fpm.log").display(),
            self.dir.join("fpm.pid").display(),
            self.pool
        );
        std::fs::write(&conf, text).unwrap();
        let _ = std::fs::remove_file(&self.socket);
        let mut cmd = Command::new(php_fpm_bin());
        cmd.arg("-y").arg(&conf).arg("-F");
        if unsafe { libc::geteuid() } == 0 {
            cmd.arg("-R");
        }
        cmd.process_group(0).stdin(Stdio::null()).stdout(Stdio::null()).stderr(Stdio::null());
        self.child = Some(cmd.spawn().expect("start php-fpm"));
        let start = Instant::now();
        let listening = || match self.port {
            Some(p) => TcpStream::connect(("127.0.0.1", p)).is_ok(),
            None => self.socket.exists(),
        };
        while !listening() {
            assert!(start.elapsed() < Duration::from_secs(20), "php-fpm did not start: {}", self.log());
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    pub fn log(&self) -> String {
        std::fs::read_to_string(self.dir.join("fpm.log")).unwrap_or_default()
    }

    /// SIGKILL to the master and its children.
    pub fn kill(&mut self) {
        if let Some(mut child) = self.child.take() {
            unsafe { libc::kill(-(child.id() as i32), libc::SIGKILL) };
            let _ = child.wait();
        }
    }

    /// Established connections to its socket, as `ss` shows them.
    pub fn connections(&self) -> usize {
        let out = Command::new("ss").args(["-x", "-H", "state", "connected", "src"]).arg(&self.socket).output();
        let out = out.expect("ss (iproute2)");
        String::from_utf8_lossy(&out.stdout).lines().filter(|l| !l.trim().is_empty()).count()
    }
}

impl Drop for PhpFpm {
    fn drop(&mut self) {
        self.kill();
    }
}
