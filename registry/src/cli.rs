//! The etcd security flags, written once for every part that talks to etcd (control, the
//! launcher's registrar): `--etcd-ca`, `--etcd-cert`, `--etcd-key`, `--etcd-user`,
//! `--etcd-password-file`. Each part declares them with its own environment prefix, since clap
//! takes variable names at compile time:
//!
//! ```
//! infera_registry::etcd_security_args!(
//!     /// How this part reaches a secured etcd.
//!     #[command(next_help_heading = "Registry")]
//!     pub struct EtcdArgs, "INFERA_EXAMPLE_ETCD"
//! );
//! ```
//!
//! makes `INFERA_EXAMPLE_ETCD_CA`, `…_CERT`, `…_KEY`, `…_USER` and `…_PASSWORD_FILE`, and
//! `EtcdArgs::security()` → [`crate::EtcdSecurity`] for [`crate::EtcdConfig::new`]. The password
//! is never a flag: only the file that holds it.

/// Declares a clap `Args` struct with the etcd security flags, environment variables
/// `<PREFIX>_CA`, `<PREFIX>_CERT`, `<PREFIX>_KEY`, `<PREFIX>_USER`, `<PREFIX>_PASSWORD_FILE`
/// (module docs). The caller depends on clap with `derive` and `env`.
#[macro_export]
macro_rules! etcd_security_args {
    ($(#[$meta:meta])* $vis:vis struct $name:ident, $prefix:literal) => {
        #[derive(::clap::Args, Clone, Debug, Default)]
        $(#[$meta])*
        $vis struct $name {
            /// CA bundle (PEM) that verifies etcd's server certificate; unset: the system's
            /// roots. Any --etcd-* flag needs every etcd endpoint to be https://.
            #[arg(long = "etcd-ca", env = concat!($prefix, "_CA"), value_name = "FILE")]
            $vis etcd_ca: Option<::std::path::PathBuf>,
            /// Client certificate (PEM chain, leaf first) for an etcd that requires one
            /// (`--client-cert-auth`). With etcd auth on and no --etcd-user, its common name is
            /// the etcd user. Read again on every connection to etcd.
            #[arg(long = "etcd-cert", env = concat!($prefix, "_CERT"), value_name = "FILE", requires = "etcd_key")]
            $vis etcd_cert: Option<::std::path::PathBuf>,
            /// The private key of --etcd-cert (PEM: PKCS#8, PKCS#1 or SEC1).
            #[arg(long = "etcd-key", env = concat!($prefix, "_KEY"), value_name = "FILE", requires = "etcd_cert")]
            $vis etcd_key: Option<::std::path::PathBuf>,
            /// etcd user to authenticate as (etcd auth), with --etcd-password-file.
            #[arg(long = "etcd-user", env = concat!($prefix, "_USER"), value_name = "NAME", requires = "etcd_password_file")]
            $vis etcd_user: Option<String>,
            /// File holding the etcd user's password (its first line). Read at start and again
            /// on every connection to etcd.
            #[arg(long = "etcd-password-file", env = concat!($prefix, "_PASSWORD_FILE"), value_name = "FILE", requires = "etcd_user")]
            $vis etcd_password_file: Option<::std::path::PathBuf>,
        }

        impl $name {
            /// The settings, for `EtcdConfig::new`.
            $vis fn security(self) -> $crate::EtcdSecurity {
                $crate::EtcdSecurity {
                    ca: self.etcd_ca,
                    cert: self.etcd_cert,
                    key: self.etcd_key,
                    user: self.etcd_user,
                    password_file: self.etcd_password_file,
                }
            }
        }
    };
}

#[cfg(test)]
mod tests {
    use clap::{CommandFactory, Parser};

    crate::etcd_security_args!(
        /// The flags as a part declares them.
        struct EtcdArgs, "INFERA_TEST_ETCD"
    );

    #[derive(Parser, Debug)]
    struct Part {
        #[command(flatten)]
        etcd: EtcdArgs,
    }

    #[test]
    fn each_flag_has_the_parts_variable_and_pairs_go_together() {
        let cmd = Part::command();
        let envs: Vec<String> = cmd
            .get_arguments()
            .filter_map(|a| a.get_env().map(|e| e.to_string_lossy().into_owned()))
            .collect();
        assert_eq!(
            envs,
            [
                "INFERA_TEST_ETCD_CA",
                "INFERA_TEST_ETCD_CERT",
                "INFERA_TEST_ETCD_KEY",
                "INFERA_TEST_ETCD_USER",
                "INFERA_TEST_ETCD_PASSWORD_FILE"
            ]
        );
        cmd.debug_assert();
        let p =
            Part::try_parse_from(["p", "--etcd-user", "u", "--etcd-password-file", "f", "--etcd-ca", "ca"])
                .unwrap();
        let s = p.etcd.security();
        assert_eq!((s.user.as_deref(), s.ca.is_some(), s.cert), (Some("u"), true, None));
        for half in [
            &["--etcd-cert", "c"][..],
            &["--etcd-key", "k"],
            &["--etcd-user", "u"],
            &["--etcd-password-file", "f"],
        ] {
            let argv = std::iter::once("p").chain(half.iter().copied());
            assert!(Part::try_parse_from(argv).is_err(), "{half:?} alone");
        }
    }
}
