//! What this machine holds, to size the models suggested for it.

/// This machine's memory in bytes; `None` where the system does not say.
pub fn memory_bytes() -> Option<u64> {
    let mut system = sysinfo::System::new().ok()?;
    system.refresh_memory();
    Some(system.total_memory()).filter(|&bytes| bytes > 0)
}

#[cfg(test)]
mod tests {
    #[test]
    fn a_machine_that_runs_tests_has_memory() {
        assert!(super::memory_bytes().is_some_and(|bytes| bytes > 1 << 20));
    }
}
