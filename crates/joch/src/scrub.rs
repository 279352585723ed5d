//! joch's own settings leave its environment once read.
//!
//! A process's initial environment stays in its memory, where
//! `/proc/<pid>/environ` shows it to every process of the same user (a
//! stdio MCP server joch starts, say), whatever `unsetenv` does later. So
//! once `joch serve` has read its configuration, the value of every
//! `JOCH_*` variable in that block (the root token, the vault key, the
//! store's URL) is overwritten with NUL bytes through `/proc/self/mem`: the
//! names stay, the values are gone. Children never inherit them either
//! (`backends/src/mcp/connect.rs`).

use std::fs::OpenOptions;
use std::io::{Read, Seek, SeekFrom, Write};

use joch_core::host::OWN_ENV_PREFIX;

/// Blanks the values of joch's own variables in the environment block;
/// answers how many it blanked.
pub fn own_variables() -> std::io::Result<usize> {
    let (start, end) = environment_block()?;
    let mut memory = OpenOptions::new()
        .read(true)
        .write(true)
        .open("/proc/self/mem")?;
    let mut block = vec![0; usize::try_from(end.saturating_sub(start)).unwrap_or(0)];
    memory.seek(SeekFrom::Start(start))?;
    memory.read_exact(&mut block)?;
    let blanked = blank_values(&mut block, OWN_ENV_PREFIX.as_bytes());
    if blanked > 0 {
        memory.seek(SeekFrom::Start(start))?;
        memory.write_all(&block)?;
    }
    Ok(blanked)
}

/// Where the environment block lies: fields 50 and 51 of
/// `/proc/self/stat` (`env_start`, `env_end`), counted after the command
/// name, which may itself hold spaces.
fn environment_block() -> std::io::Result<(u64, u64)> {
    let stat = std::fs::read_to_string("/proc/self/stat")?;
    let invalid = || {
        std::io::Error::new(
            std::io::ErrorKind::InvalidData,
            "unexpected /proc/self/stat",
        )
    };
    let after_name = stat
        .rfind(')')
        .map(|i| &stat[i + 1..])
        .ok_or_else(invalid)?;
    // The first field after the name is field 3.
    let fields: Vec<&str> = after_name.split_whitespace().collect();
    let field = |n: usize| -> std::io::Result<u64> {
        fields
            .get(n - 3)
            .and_then(|f| f.parse().ok())
            .ok_or_else(invalid)
    };
    Ok((field(50)?, field(51)?))
}

/// Overwrites with NULs the value of each `NAME=value` entry whose name
/// starts with `prefix`; answers how many.
fn blank_values(block: &mut [u8], prefix: &[u8]) -> usize {
    let mut blanked = 0;
    for entry in block.split_mut(|b| *b == 0) {
        if !entry.starts_with(prefix) {
            continue;
        }
        if let Some(eq) = entry.iter().position(|b| *b == b'=') {
            entry[eq + 1..].fill(0);
            blanked += 1;
        }
    }
    blanked
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_joch_values_are_blanked() {
        let mut block = b"PATH=/bin\0JOCH_ADMIN_TOKEN=s3cret\0HOME=/root\0JOCH_ADDR=x\0".to_vec();
        assert_eq!(blank_values(&mut block, b"JOCH_"), 2);
        assert_eq!(
            block,
            b"PATH=/bin\0JOCH_ADMIN_TOKEN=\0\0\0\0\0\0\0HOME=/root\0JOCH_ADDR=\0\0".to_vec()
        );
    }

    #[test]
    fn the_block_is_found() {
        let (start, end) = environment_block().unwrap();
        assert!(start > 0 && end > start);
    }
}
