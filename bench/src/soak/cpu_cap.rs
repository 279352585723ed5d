//! A CPU budget for one process: a cgroup of its own whose CPU controller
//! lets it run at most so many cores' worth of time (`--replica-cpus`), as
//! if it had a small machine to itself. Replicas that share the bench's
//! cores with PostgreSQL and the client bring no CPU of their own; capped,
//! each brings its budget, as separate machines would.
//!
//! Linux only, where the bench may create cgroups (root, or a delegated
//! tree): cgroup v2's `cpu.max`, or v1's CFS quota.

use std::fs;
use std::path::{Path, PathBuf};

use anyhow::{Context, Result, ensure};

/// The scheduler period a quota is a share of, in µs.
const PERIOD_US: u64 = 100_000;

/// A process's cgroup, removed when dropped (after the process has ended).
pub(crate) struct CpuCap {
    dir: PathBuf,
}

impl CpuCap {
    /// Moves process `pid` into a new cgroup capped at `cpus` cores.
    pub(crate) fn put(pid: u32, cpus: f64) -> Result<CpuCap> {
        ensure!(
            cpus > 0.0 && cpus.is_finite(),
            "a CPU cap must be a positive number of cores, got {cpus}"
        );
        let quota = ((cpus * PERIOD_US as f64).round() as u64).max(1_000);
        let v2 = Path::new("/sys/fs/cgroup/cgroup.controllers").exists();
        let root = Path::new(if v2 {
            "/sys/fs/cgroup"
        } else {
            "/sys/fs/cgroup/cpu"
        });
        let dir = root.join(format!("joch-bench-{pid}"));
        let cannot = || {
            format!(
                "creating {} (--replica-cpus needs a cgroup CPU controller this user may write)",
                dir.display()
            )
        };
        if v2 {
            // The controller must be on for the root's children; it may already be.
            let _ = fs::write(root.join("cgroup.subtree_control"), "+cpu");
        }
        fs::create_dir(&dir).with_context(cannot)?;
        let cap = CpuCap { dir };
        if v2 {
            cap.write("cpu.max", &format!("{quota} {PERIOD_US}"))?;
        } else {
            cap.write("cpu.cfs_period_us", &PERIOD_US.to_string())?;
            cap.write("cpu.cfs_quota_us", &quota.to_string())?;
        }
        cap.write("cgroup.procs", &pid.to_string())?;
        Ok(cap)
    }

    fn write(&self, file: &str, value: &str) -> Result<()> {
        let path = self.dir.join(file);
        fs::write(&path, value).with_context(|| format!("writing {value:?} to {}", path.display()))
    }
}

impl Drop for CpuCap {
    fn drop(&mut self) {
        let _ = fs::remove_dir(&self.dir);
    }
}
