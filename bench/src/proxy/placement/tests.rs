//! CPU lists: parsing, printing, and the placement's refusals.

use super::*;

fn list(cpus: &[usize]) -> CpuList {
    CpuList(cpus.iter().copied().collect())
}

fn parse(s: &str) -> Result<CpuList, CpuListError> {
    s.parse()
}

#[test]
fn parses_numbers_ranges_and_mixes() {
    assert_eq!(parse("1"), Ok(list(&[1])));
    assert_eq!(parse("0,2"), Ok(list(&[0, 2])));
    assert_eq!(parse("2-3"), Ok(list(&[2, 3])));
    assert_eq!(parse(" 0-1, 4 ,6-6 "), Ok(list(&[0, 1, 4, 6])));
    // Repeats and overlaps are the same CPUs.
    assert_eq!(parse("3,1-3,1"), Ok(list(&[1, 2, 3])));
    assert_eq!(parse("1023"), Ok(list(&[1023])));
}

#[test]
fn refuses_what_is_not_a_cpu_list() {
    assert_eq!(parse(""), Err(CpuListError::Empty));
    assert_eq!(parse("  "), Err(CpuListError::Empty));
    for bad in ["x", "1,", ",1", "1,,2", "-1", "1-", "1-2-3", "+1", "1.5", "0x1", "one"] {
        let err = parse(bad).unwrap_err();
        assert!(matches!(err, CpuListError::Syntax(_)), "{bad}: {err:?}");
    }
    // The error names the whole item, not the half of a range that failed.
    assert_eq!(parse("0,2-x"), Err(CpuListError::Syntax("2-x".into())));
    assert_eq!(parse("3-1"), Err(CpuListError::Backwards("3-1".into())));
    assert_eq!(parse("1024"), Err(CpuListError::TooLarge { cpu: "1024".into(), max: 1023 }));
    assert!(matches!(parse("0-99999999999999999999999"), Err(CpuListError::TooLarge { .. })));
}

#[test]
fn prints_as_the_kernel_does() {
    assert_eq!(list(&[1]).to_string(), "1");
    assert_eq!(list(&[0, 1, 2, 3, 6]).to_string(), "0-3,6");
    assert_eq!(list(&[0, 2, 4, 5]).to_string(), "0,2,4-5");
    assert_eq!(list(&[]).to_string(), "");
    for s in ["0", "0-1", "0-3,6", "1,3,5-7,9"] {
        assert_eq!(parse(s).unwrap().to_string(), s);
    }
}

#[test]
fn plans_the_split_or_refuses_it() {
    let two = list(&[0, 1]);
    assert_eq!(Placement::plan(None, two.clone()), Ok(Placement::Shared(two.clone())));
    assert_eq!(
        Placement::plan(Some(list(&[1])), two.clone()),
        Ok(Placement::Pinned { proxy: list(&[1]), bench: list(&[0]) })
    );
    assert_eq!(
        Placement::plan(Some(list(&[2, 3])), list(&[0, 1, 2, 3, 4])),
        Ok(Placement::Pinned { proxy: list(&[2, 3]), bench: list(&[0, 1, 4]) })
    );
    // Not on this machine (or outside this process's cpuset).
    let err = Placement::plan(Some(list(&[1, 4])), two.clone()).unwrap_err();
    assert_eq!(err, CpuListError::Unavailable { cpu: 4, available: two.clone() });
    assert_eq!(
        err.to_string(),
        "CPU 4 is not on this machine or not available to this process (available: 0-1)"
    );
    // Nothing left for the clients, control and the sim.
    let err = Placement::plan(Some(list(&[0, 1])), two.clone()).unwrap_err();
    assert_eq!(err, CpuListError::NoRemainder { proxy: two.clone(), available: two.clone() });
    assert!(err.to_string().contains("leaves no CPU"), "{err}");
    assert_eq!(
        Placement::plan(Some(list(&[0])), list(&[0])),
        Err(CpuListError::NoRemainder { proxy: list(&[0]), available: list(&[0]) })
    );
    assert_eq!(Placement::plan(Some(list(&[])), two), Err(CpuListError::Empty));
}

#[test]
fn describes_the_placement() {
    let shared = Placement::Shared(list(&[0, 1]));
    assert_eq!(shared.to_string(), "shared: clients, control, sim and proxy all on CPUs 0-1");
    let pinned = Placement::Pinned { proxy: list(&[1]), bench: list(&[0]) };
    assert_eq!(pinned.to_string(), "pinned: proxy on CPUs 1; clients, control and sim on CPUs 0");
}
