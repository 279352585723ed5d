//! The `joch serve` process the soak runs against: a child under an
//! open-files limit, killed when dropped, read through `/proc`.

use std::ffi::OsStr;
use std::io::{BufRead, BufReader};
use std::net::SocketAddr;
use std::path::Path;
use std::process::{Child, Command, Stdio};

use anyhow::{Context, Result, bail};

use super::cpu_cap::CpuCap;

/// A running `joch serve`.
pub(crate) struct Joch {
    child: Child,
    pub(crate) addr: SocketAddr,
    /// Its CPU budget, if it has one; removed once the child has ended.
    _cap: Option<CpuCap>,
}

impl Joch {
    /// Starts `bin` on a fresh database in `dir`, under `ulimit -n
    /// open_files`, and waits for the line naming its address.
    pub(crate) fn start(bin: &Path, dir: &Path, open_files: u64) -> Result<Joch> {
        Self::start_with(bin, dir, open_files, &[])
    }

    /// [`Joch::start`], with more flags for `joch serve`.
    pub(crate) fn start_with(
        bin: &Path,
        dir: &Path,
        open_files: u64,
        flags: &[&str],
    ) -> Result<Joch> {
        Self::start_db(bin, &dir.join("joch.db"), open_files, flags)
    }

    /// [`Joch::start_with`], on the SQLite file `db`.
    pub(crate) fn start_db(bin: &Path, db: &Path, open_files: u64, flags: &[&str]) -> Result<Joch> {
        let mut args = vec![OsStr::new("--db"), db.as_os_str()];
        args.extend(flags.iter().map(OsStr::new));
        Self::spawn(bin, open_files, &args)
    }

    /// A replica of the shared PostgreSQL store `url`, capped at `cpus`
    /// cores if given ([`CpuCap`]).
    pub(crate) fn start_replica(
        bin: &Path,
        url: &str,
        open_files: u64,
        cpus: Option<f64>,
    ) -> Result<Joch> {
        let mut joch = Self::spawn(bin, open_files, &[OsStr::new("--store"), OsStr::new(url)])?;
        if let Some(cpus) = cpus {
            joch._cap = Some(CpuCap::put(joch.child.id(), cpus)?);
        }
        Ok(joch)
    }

    fn spawn(bin: &Path, open_files: u64, args: &[&OsStr]) -> Result<Joch> {
        if !bin.is_file() {
            bail!(
                "no joch binary at {} (build it: cargo build --release -p joch, or pass --soak-joch)",
                bin.display()
            );
        }
        let mut child = Command::new("sh")
            .arg("-c")
            .arg(format!("ulimit -n {open_files} && exec \"$0\" \"$@\""))
            .arg(bin)
            .args(["serve", "--addr", "127.0.0.1:0"])
            .args(args)
            .env("JOCH_LOG", "warn")
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .context("starting joch")?;
        let stdout = child.stdout.take().context("joch's stdout")?;
        let mut lines = BufReader::new(stdout).lines();
        let line = lines
            .next()
            .context("joch printed nothing")?
            .context("reading joch's stdout")?;
        // Keep draining so joch never blocks on a full pipe.
        std::thread::spawn(move || lines.for_each(drop));
        let addr = line
            .split_whitespace()
            .find_map(|word| word.strip_prefix("http://"))
            .with_context(|| format!("no address in {line:?}"))?
            .parse()
            .with_context(|| format!("no address in {line:?}"))?;
        Ok(Joch {
            child,
            addr,
            _cap: None,
        })
    }

    /// Resident memory, in KiB.
    pub(crate) fn rss_kib(&self) -> Option<u64> {
        self.status_kib("VmRSS")
    }

    /// Resident memory by where it comes from, in KiB: the heap and other
    /// anonymous memory, and mapped files (SQLite's `-shm` index among
    /// them), shared memory included.
    pub(crate) fn rss_parts_kib(&self) -> Option<(u64, u64)> {
        let mapped = self.status_kib("RssFile")? + self.status_kib("RssShmem")?;
        Some((self.status_kib("RssAnon")?, mapped))
    }

    /// A `kB` figure of `/proc/<pid>/status`.
    fn status_kib(&self, field: &str) -> Option<u64> {
        let status = std::fs::read_to_string(format!("/proc/{}/status", self.child.id())).ok()?;
        status
            .lines()
            .find_map(|l| l.strip_prefix(field)?.strip_prefix(':'))?
            .trim()
            .trim_end_matches("kB")
            .trim()
            .parse()
            .ok()
    }

    /// CPU time spent so far (user and system), in ms: `/proc/<pid>/stat`
    /// counts it in clock ticks, which are 10 ms on Linux (`CLK_TCK` 100).
    pub(crate) fn cpu_ms(&self) -> Option<f64> {
        let stat = std::fs::read_to_string(format!("/proc/{}/stat", self.child.id())).ok()?;
        // Fields after the command, which may hold spaces, in parentheses.
        let fields: Vec<&str> = stat.rsplit_once(')')?.1.split_whitespace().collect();
        let ticks = |i: usize| fields.get(i)?.parse::<u64>().ok();
        // utime and stime are the 14th and 15th fields; the state is the 3rd.
        Some((ticks(11)? + ticks(12)?) as f64 * 10.0)
    }

    /// Context switches of all its threads so far, voluntary or not: each
    /// hand-off between threads that found the other asleep costs one.
    pub(crate) fn context_switches(&self) -> Option<u64> {
        let tasks = std::fs::read_dir(format!("/proc/{}/task", self.child.id())).ok()?;
        let mut total = 0;
        for task in tasks.flatten() {
            let status = std::fs::read_to_string(task.path().join("status")).unwrap_or_default();
            total += status
                .lines()
                .filter(|l| l.contains("ctxt_switches:"))
                .filter_map(|l| l.split_whitespace().nth(1)?.parse::<u64>().ok())
                .sum::<u64>();
        }
        Some(total)
    }

    /// File descriptors open.
    pub(crate) fn open_files(&self) -> Option<u64> {
        let fds = std::fs::read_dir(format!("/proc/{}/fd", self.child.id())).ok()?;
        Some(fds.count() as u64)
    }
}

impl Drop for Joch {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
