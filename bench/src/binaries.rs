//! The benches that run control and the proxies as processes use the binaries `INFERA_BIN_DIR`
//! names, and measure release ones (`cargo xtask bench <name>` builds and sets them).

/// Fails, naming the calling bench, unless `INFERA_BIN_DIR` is set and holds each of `names`.
pub(crate) fn release_binaries(bench: &str, names: &[&str]) -> anyhow::Result<()> {
    if std::env::var_os("INFERA_BIN_DIR").is_none() {
        let beside = std::env::current_exe()?;
        let hint = beside.parent().map(|d| d.display().to_string()).unwrap_or_default();
        anyhow::bail!(
            "set INFERA_BIN_DIR to the directory of the release {} (e.g. INFERA_BIN_DIR={hint}), \
             or run cargo xtask bench {bench}",
            names.join(" and ")
        );
    }
    for name in names {
        infera_testkit::process::binary(name)?;
    }
    Ok(())
}
