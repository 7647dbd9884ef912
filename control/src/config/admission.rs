//! `--admission`, `--service-classes`: fleet admission and the class book
//! (`manual/features/service_classes.md`).

use std::path::PathBuf;

use clap::Args as ClapArgs;

use crate::admission::PrefillGuard;
use crate::classes::{ClassBook, ClassFileError};

/// Whether decode picks go through fleet admission.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub(super) enum AdmissionMode {
    /// Classes are checked and counted; nothing waits.
    Off,
    /// Admission from the predicted step, with control's one queue.
    On,
}

#[derive(ClapArgs, Debug)]
#[command(next_help_heading = "Admission")]
pub(super) struct AdmissionArgs {
    /// Fleet admission of decode picks. `on`: a request is booked only where its worker's
    /// predicted decode step (the trusted step fit of `--decode-weight auto`'s readings) stays
    /// within the ITL target of its class and of every request the worker holds; the others wait
    /// in control's one queue (priority, then tenant share, then deadline) and are shed when
    /// their TTFT target can no longer be met. `off`: classes are checked and counted, nothing
    /// waits.
    #[arg(long, env = "INFERA_ADMISSION", value_enum, default_value_t = AdmissionMode::Off)]
    admission: AdmissionMode,
    /// Whether admission holds a request of a class below the top priority for the top class's
    /// first token (the prefill guard). `queue`: while the prefill queue it would join, with what
    /// it would book there (its prompt less what that prefill caches of it), predicts the top
    /// class's next first token past its TTFT target, everything queued counted as ahead of it.
    /// `off` (the default): never; it is held to its ITL target alone.
    #[arg(long, env = "INFERA_ADMISSION_PREFILL_GUARD", value_enum, default_value_t = PrefillGuard::Off)]
    admission_prefill_guard: PrefillGuard,
    /// Service classes and tenant weights (TOML), read again on SIGHUP. Without it: `interactive`
    /// (TTFT 2 s, ITL 50 ms, the default) and `batch` (TTFT 60 s, ITL 250 ms), every tenant weight 1.
    #[arg(long, env = "INFERA_SERVICE_CLASSES")]
    service_classes: Option<PathBuf>,
}

/// Admission as configured.
#[derive(Clone, Debug)]
pub struct AdmissionConfig {
    /// Whether decode picks are admitted on the predicted step.
    pub on: bool,
    /// When a lower class is held for the top class's first token.
    pub prefill_guard: PrefillGuard,
    /// The class book read at start.
    pub classes: ClassBook,
    /// Where it was read from (read again on SIGHUP).
    pub file: Option<PathBuf>,
}

impl AdmissionArgs {
    /// The configuration, its file read once.
    pub(super) fn config(self) -> Result<AdmissionConfig, ClassFileError> {
        let classes = match &self.service_classes {
            Some(path) => ClassBook::load(path)?,
            None => ClassBook::default(),
        };
        Ok(AdmissionConfig {
            on: self.admission == AdmissionMode::On,
            prefill_guard: self.admission_prefill_guard,
            classes,
            file: self.service_classes,
        })
    }
}
