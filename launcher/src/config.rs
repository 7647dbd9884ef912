//! The `infera-launch` command line (every flag also an `INFERA_LAUNCH_*` environment variable)
//! → [`Config`], with the deployment file loaded and checked.

use std::path::PathBuf;

use clap::{Parser, Subcommand};

use crate::error::LaunchError;
use crate::plan::Plan;

/// infera-launch: deployment file → SGLang workers.
#[derive(Parser, Debug)]
#[command(name = "infera-launch", version, about, long_about = None)]
pub struct Args {
    #[command(subcommand)]
    command: CommandArgs,
}

#[derive(Subcommand, Debug)]
enum CommandArgs {
    /// Print each worker's environment and command line (shell-quoted, copy-pasteable).
    Plan {
        /// The deployment file (TOML).
        #[arg(env = "INFERA_LAUNCH_FILE")]
        file: PathBuf,
    },
}

/// What to do, with a checked deployment.
#[derive(Debug)]
pub struct Config {
    /// The task.
    pub command: Command,
}

/// A task.
#[derive(Debug)]
pub enum Command {
    /// Print the plan.
    Plan(Plan),
}

impl TryFrom<Args> for Config {
    type Error = LaunchError;

    fn try_from(a: Args) -> Result<Self, LaunchError> {
        let command = match a.command {
            CommandArgs::Plan { file } => Command::Plan(crate::plan_file(&file)?),
        };
        Ok(Self { command })
    }
}

#[cfg(test)]
mod tests {
    use clap::CommandFactory;

    use super::*;

    #[test]
    fn verify_cli() {
        Args::command().debug_assert();
    }

    #[test]
    fn every_argument_has_an_env_var() {
        let cmd = Args::command();
        for sub in cmd.get_subcommands() {
            for arg in sub.get_arguments().filter(|a| !["help", "version"].contains(&a.get_id().as_str())) {
                let env = arg.get_env().unwrap_or_else(|| panic!("{} has no env var", arg.get_id()));
                assert!(env.to_str().unwrap().starts_with("INFERA_LAUNCH_"), "{env:?}");
            }
        }
    }
}
