//! The command-line conventions every infera binary keeps, checked by each binary's tests.

/// Panics unless `cmd` is a consistent clap command (clap's own `debug_assert`) whose every
/// flag can also be set by an `INFERA_*` environment variable.
pub fn check_conventions(cmd: clap::Command) {
    cmd.clone().debug_assert();
    for arg in cmd.get_arguments() {
        if ["help", "version"].contains(&arg.get_id().as_str()) {
            continue;
        }
        let env = arg.get_env().unwrap_or_else(|| panic!("--{} has no environment variable", arg.get_id()));
        let env = env.to_string_lossy();
        assert!(env.starts_with("INFERA_"), "--{}: {env} does not start with INFERA_", arg.get_id());
    }
}
