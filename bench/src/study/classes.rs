//! Control's class book for an admission arm, on the study's clock. Goodput judges each request
//! against its class's targets in emulated time ([`crate::replay::goodput`]). Control keeps its
//! TTFT deadlines, prefill phases and prefill-queue predictions on its own wall clock, which runs
//! `speedup` times faster than the emulation, but reads the engines' step times in the engines'
//! own (emulated) milliseconds. Its default book (TTFT 2 s and 60 s of wall clock) would hold,
//! yield and shed against targets `speedup` times looser than the ones goodput counts. So an
//! admission arm gets the same two classes with each TTFT divided by the speedup and each ITL as
//! it is: the targets a deployment in real time would configure, as this compressed run sees them.

use crate::replay::goodput::Class;

/// The class file (`--service-classes`) for a run at `speedup`: `interactive` (the default,
/// priority 1) and `batch` (priority 0), with goodput's targets.
pub(crate) fn file(speedup: f64) -> String {
    let mut out = String::from("default_class = \"interactive\"\n");
    for (class, priority) in [(Class::Interactive, 1), (Class::Batch, 0)] {
        let (ttft_ms, itl_ms) = class.targets_ms();
        let ttft_ms = (ttft_ms / speedup).round().max(1.0) as u64;
        out.push_str(&format!(
            "\n[[classes]]\nname = \"{}\"\nttft_ms = {ttft_ms}\nitl_ms = {}\npriority = {priority}\n",
            class.name(),
            itl_ms.round() as u64,
        ));
    }
    out
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use infera_control::classes::ClassBook;
    use infera_proto::types::ServiceClassName;

    use super::*;

    /// Read by control's own parser: (name, TTFT, ITL, priority) of each class, the default's first.
    fn book(speedup: f64) -> Vec<(String, Duration, Duration, u8)> {
        let book = ClassBook::parse(&file(speedup)).unwrap();
        let default = book.class(None).unwrap().name.clone();
        let mut rows: Vec<_> =
            book.classes().map(|c| (c.name.as_str().to_owned(), c.ttft, c.itl, c.priority)).collect();
        rows.sort_by_key(|r| r.0 != default.as_str());
        rows
    }

    #[test]
    fn the_ttft_targets_follow_the_clock_and_the_itl_targets_the_engine() {
        let ms = Duration::from_millis;
        let row = |name: &str, ttft, itl, priority| (name.to_owned(), ms(ttft), ms(itl), priority);
        // In real time, control's built-in classes.
        assert_eq!(book(1.0), vec![row("interactive", 2_000, 50, 1), row("batch", 60_000, 250, 0)]);
        let builtin = ClassBook::default();
        let batch = builtin.class(Some(&ServiceClassName::new("batch"))).unwrap();
        assert_eq!((batch.ttft, batch.itl), (ms(60_000), ms(250)));
        // Ten times compressed: a tenth of the wall clock to the first token, the same step.
        assert_eq!(book(10.0), vec![row("interactive", 200, 50, 1), row("batch", 6_000, 250, 0)]);
    }
}
