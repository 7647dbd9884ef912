//! The public request traces the benchmarks replay: where each comes from, under which licence,
//! and the checksum of its content. The sources and the packing are described in
//! manual/reference/traces.md.

/// A trace file of `traces/`.
#[derive(Debug)]
pub(crate) struct Trace {
    /// Its path under `traces/` (gzip, level 9, no name or time in the header).
    pub(crate) file: &'static str,
    /// The upstream repository on GitHub, `owner/name`.
    pub(crate) repo: &'static str,
    /// The commit it is taken from.
    pub(crate) commit: &'static str,
    /// What of the repository it is.
    pub(crate) source: Source,
    /// The upstream licence.
    pub(crate) licence: &'static str,
    /// sha256 of the decompressed file.
    pub(crate) sha256: &'static str,
}

/// How a trace file is made from its repository.
#[derive(Debug)]
pub(crate) enum Source {
    /// One file, byte for byte.
    File(&'static str),
    /// One session per line: the files `traces/trace_NNNN.json` for NNNN in 1..=`last`, except
    /// `missing`, each upstream file's bytes and a newline, in id order.
    Sessions { last: u32, missing: &'static [u32] },
}

const MOONCAKE: &str = "kvcache-ai/Mooncake";
const MOONCAKE_COMMIT: &str = "3b5a594133958449a1feaf1c9e0fc1b553e34a28";
const AZURE: &str = "Azure/AzurePublicDataset";
const AZURE_COMMIT: &str = "b469a113cedca53ddc3bdea71a143dc4b7d8700c";
const WEKA: &str = "callanjfox/kv-cache-tester";

/// Every trace, in the order `cargo xtask traces` fetches them.
pub(crate) const TRACES: &[Trace] = &[
    Trace {
        file: "mooncake/conversation_trace.jsonl.gz",
        repo: MOONCAKE,
        commit: MOONCAKE_COMMIT,
        source: Source::File("FAST25-release/traces/conversation_trace.jsonl"),
        licence: "Apache-2.0",
        sha256: "b8cbb061a85206d729d91cdc2981f43c9e0d99209dce588d3af5f7934408b9df",
    },
    Trace {
        file: "mooncake/synthetic_trace.jsonl.gz",
        repo: MOONCAKE,
        commit: MOONCAKE_COMMIT,
        source: Source::File("FAST25-release/traces/synthetic_trace.jsonl"),
        licence: "Apache-2.0",
        sha256: "bd070915a98fc0ed264d7cfef2ce746002eb3076a695ec31ba2674c0111ec131",
    },
    Trace {
        file: "azure-llm-2023/AzureLLMInferenceTrace_code.csv.gz",
        repo: AZURE,
        commit: AZURE_COMMIT,
        source: Source::File("data/AzureLLMInferenceTrace_code.csv"),
        licence: "CC-BY-4.0",
        sha256: "54e9a6d2a4bd06ba1e060304b900abbc74cbea53de96506e60fe5bb4f2277fb6",
    },
    Trace {
        file: "azure-llm-2023/AzureLLMInferenceTrace_conv.csv.gz",
        repo: AZURE,
        commit: AZURE_COMMIT,
        source: Source::File("data/AzureLLMInferenceTrace_conv.csv"),
        licence: "CC-BY-4.0",
        sha256: "2f1e5b666d4e3055fdbba98598ce2ec307767b9064e03e2fa46676dbcc7d0bf8",
    },
    Trace {
        file: "agentx/weka_v6.jsonl.gz",
        repo: WEKA,
        commit: "7647c82d65bd5445328e9f8c31d37dbea5914289",
        // The traces of 4 MiB and more: the sets the project's results were measured on.
        source: Source::Sessions {
            last: 522,
            missing: &[
                1, 2, 3, 4, 6, 11, 12, 14, 17, 18, 19, 20, 21, 24, 25, 26, 29, 30, 32, 33, 34, 35, 38, 39,
                42, 43, 44, 45, 47, 50, 53, 55, 57, 58, 60, 61, 116, 122, 137, 148, 150, 158, 164, 218, 221,
                222, 225, 229, 233, 236, 238, 240, 244, 246, 252, 259, 264, 270, 272, 273, 283, 284, 289,
                290, 300, 483, 489, 520,
            ],
        },
        licence: "Apache-2.0",
        sha256: "a3318c45d85c7afb54fd32348afbb2faa94ba704d8d0fd2fa57eeacf6bcf3803",
    },
    Trace {
        file: "agentx/weka_v8.jsonl.gz",
        repo: WEKA,
        commit: "c9b3da54fc2f555942720527b86c1979fcae9bb2",
        source: Source::Sessions {
            last: 739,
            missing: &[
                5, 25, 31, 88, 168, 203, 241, 285, 370, 378, 379, 383, 385, 390, 391, 395, 401, 405, 407,
                418, 424, 425, 429, 431, 433, 439, 442, 444, 451,
            ],
        },
        licence: "Apache-2.0",
        sha256: "a01d2aba15a4a29592f11f063a3fb1b86bf20e561ecd83f20d80c5768777ccdf",
    },
];

impl Trace {
    /// The raw URL of `path` at the trace's commit.
    pub(crate) fn url(&self, path: &str) -> String {
        format!("https://raw.githubusercontent.com/{}/{}/{path}", self.repo, self.commit)
    }

    /// The upstream files it is made of, in order.
    pub(crate) fn parts(&self) -> Vec<String> {
        match &self.source {
            Source::File(path) => vec![(*path).to_owned()],
            Source::Sessions { last, missing } => (1..=*last)
                .filter(|id| !missing.contains(id))
                .map(|id| format!("traces/trace_{id:04}.json"))
                .collect(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_session_sets_hold_the_counts_the_results_used() {
        let count = |file: &str| TRACES.iter().find(|t| t.file == file).unwrap().parts().len();
        assert_eq!(count("agentx/weka_v6.jsonl.gz"), 454);
        assert_eq!(count("agentx/weka_v8.jsonl.gz"), 710);
        let v8 = TRACES.iter().find(|t| t.file == "agentx/weka_v8.jsonl.gz").unwrap();
        assert_eq!(v8.parts()[..2], ["traces/trace_0001.json", "traces/trace_0002.json"]);
        assert_eq!(v8.parts()[4], "traces/trace_0006.json", "trace 5 is missing");
    }

    #[test]
    fn every_trace_has_a_checksum_and_a_place_of_its_own() {
        let mut files: Vec<&str> = TRACES.iter().map(|t| t.file).collect();
        files.sort_unstable();
        files.dedup();
        assert_eq!(files.len(), TRACES.len());
        for t in TRACES {
            assert!(t.sha256.len() == 64 && t.sha256.bytes().all(|b| b.is_ascii_hexdigit()), "{}", t.file);
            assert!(t.file.ends_with(".gz") && t.commit.len() == 40, "{}", t.file);
        }
        // The manual's table names each file with its checksum.
        let manual = include_str!("../../../manual/reference/traces.md");
        for t in TRACES {
            let row = manual.lines().find(|l| l.contains(&format!("`{}`", t.file)));
            assert!(
                row.is_some_and(|r| r.contains(t.sha256) && r.contains(t.licence)),
                "{} in the manual",
                t.file
            );
        }
        let mooncake = &TRACES[0];
        assert_eq!(
            mooncake.url(&mooncake.parts()[0]),
            "https://raw.githubusercontent.com/kvcache-ai/Mooncake/3b5a594133958449a1feaf1c9e0fc1b553e34a28/FAST25-release/traces/conversation_trace.jsonl"
        );
    }
}
