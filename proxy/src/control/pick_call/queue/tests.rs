use infera_proto::error::ErrorReason;

use super::*;

/// One call as control saw it: the kind and request id of every pick it carried.
#[derive(Clone, Debug, PartialEq, Eq)]
enum Call {
    One(PickKind, String),
    Many(Vec<(PickKind, String)>),
}

/// A control as the queue sees it: what it was sent, and how it answers. A pick for the model
/// "nope" is refused as control refuses an unknown model.
#[derive(Clone, Default)]
struct Control {
    inner: Arc<Mutex<Seen>>,
}

#[derive(Default)]
struct Seen {
    /// Older than PickMany: answers it UNIMPLEMENTED.
    old: bool,
    /// PickMany fails as a transport would (UNAVAILABLE, no reason of control's).
    down: bool,
    calls: Vec<Call>,
    /// The size of every batch the queue formed.
    batches: Vec<usize>,
    /// The `grpc-timeout` of every call that got through.
    timeouts: Vec<Option<String>>,
}

fn answer(kind: PickKind, pick: &pb::PickRequest) -> Result<pb::PickResponse, Status> {
    if pick.model == "nope" {
        return Err(ErrorReason::UnknownModel.status(format!("no model {:?}", pick.model)));
    }
    let mode = if kind == PickKind::Decode { pb::DecodeInputDemand::On as i32 } else { 0 };
    Ok(pb::PickResponse { reservation_id: format!("r-{}", pick.request_id), mode, ..Default::default() })
}

impl PickCalls for Control {
    async fn pick_one(
        &mut self,
        kind: PickKind,
        req: tonic::Request<pb::PickRequest>,
    ) -> Result<pb::PickResponse, Status> {
        let mut seen = self.inner.lock().unwrap();
        seen.timeouts.push(req.metadata().get("grpc-timeout").map(|v| v.to_str().unwrap().to_owned()));
        let pick = req.into_inner();
        seen.calls.push(Call::One(kind, pick.request_id.clone()));
        answer(kind, &pick)
    }

    async fn pick_many(
        &mut self,
        req: tonic::Request<pb::PickManyRequest>,
    ) -> Result<pb::PickManyResponse, Status> {
        let mut seen = self.inner.lock().unwrap();
        if seen.old {
            return Err(Status::unimplemented("unknown method PickMany"));
        }
        if seen.down {
            return Err(Status::unavailable("connection refused"));
        }
        seen.timeouts.push(req.metadata().get("grpc-timeout").map(|v| v.to_str().unwrap().to_owned()));
        let picks = req.into_inner().picks;
        let kind = |item: &pb::PickItem| convert_kind(item.kind);
        seen.calls.push(Call::Many(
            picks.iter().map(|item| (kind(item), item.pick.as_ref().unwrap().request_id.clone())).collect(),
        ));
        let results = picks
            .iter()
            .map(|item| {
                let outcome = match answer(kind(item), item.pick.as_ref().unwrap()) {
                    Ok(picked) => Outcome::Picked(picked),
                    Err(s) => Outcome::Failed(infera_proto::error::failure_of_status(&s)),
                };
                pb::PickResult { outcome: Some(outcome) }
            })
            .collect();
        Ok(pb::PickManyResponse { results })
    }
}

fn convert_kind(v: i32) -> PickKind {
    infera_proto::convert::pick_kind("kind", v).unwrap()
}

impl Destination for Control {
    type Calls = Self;
    fn calls(&self) -> Self {
        self.clone()
    }
    fn batched(&self, picks: usize) {
        self.inner.lock().unwrap().batches.push(picks);
    }
}

type Answer = oneshot::Receiver<Result<pb::PickResponse, Status>>;

fn asked(kind: PickKind, id: &str, model: &str, pages: usize) -> (Asked, Answer) {
    let (answer, answered) = oneshot::channel();
    let pick = pb::PickRequest {
        request_id: id.to_owned(),
        model: model.to_owned(),
        fixed_page_hashes: (0..pages as i64).collect(),
        ..Default::default()
    };
    let asked = Asked { kind, pick, span: tracing::Span::none(), timeout: Duration::from_secs(10), answer };
    (asked, answered)
}

/// A queue running on `control`, and its sender.
fn start(control: &Control) -> mpsc::UnboundedSender<Asked> {
    let (tx, rx) = mpsc::unbounded_channel();
    tokio::spawn(run(rx, control.clone()));
    tx
}

fn reservation(answer: Result<pb::PickResponse, Status>) -> String {
    answer.expect("picked").reservation_id
}

#[tokio::test]
async fn picks_asked_together_go_out_in_one_call_and_each_gets_its_own_answer() {
    let control = Control::default();
    let queue = start(&control);
    let (a, a_answer) = asked(PickKind::Prefill, "a", "m", 0);
    let (b, b_answer) = asked(PickKind::Decode, "b", "nope", 0);
    let (c, c_answer) = asked(PickKind::Decode, "c", "m", 0);
    for asked in [a, b, c] {
        queue.send(asked).unwrap();
    }
    assert_eq!(reservation(a_answer.await.unwrap()), "r-a");
    let refused = b_answer.await.unwrap().expect_err("an unknown model is refused");
    assert_eq!(refused.code(), Code::NotFound);
    assert_eq!(StatusReason::of(&refused).known(), Some(ErrorReason::UnknownModel), "the reason survives");
    assert_eq!(reservation(c_answer.await.unwrap()), "r-c");
    let seen = control.inner.lock().unwrap();
    let together = vec![
        (PickKind::Prefill, "a".to_owned()),
        (PickKind::Decode, "b".to_owned()),
        (PickKind::Decode, "c".to_owned()),
    ];
    assert_eq!(seen.calls, vec![Call::Many(together)]);
    assert_eq!(seen.batches, vec![3]);
    assert_eq!(seen.timeouts, vec![Some("10000000u".to_owned())], "the call carries the picks' deadline");
}

#[tokio::test]
async fn a_lone_pick_goes_out_as_its_own_unary_call() {
    let control = Control::default();
    let queue = start(&control);
    let (a, a_answer) = asked(PickKind::Decode, "a", "m", 0);
    queue.send(a).unwrap();
    assert_eq!(reservation(a_answer.await.unwrap()), "r-a");
    let (b, b_answer) = asked(PickKind::Prefill, "b", "m", 0);
    queue.send(b).unwrap();
    assert_eq!(reservation(b_answer.await.unwrap()), "r-b");
    let seen = control.inner.lock().unwrap();
    assert_eq!(
        seen.calls,
        vec![Call::One(PickKind::Decode, "a".into()), Call::One(PickKind::Prefill, "b".into())]
    );
    assert_eq!(seen.timeouts, vec![Some("10000000u".to_owned()); 2]);
}

#[tokio::test(start_paused = true)]
async fn an_older_control_gets_unary_calls_until_it_is_tried_again_a_minute_later() {
    let control = Control::default();
    control.inner.lock().unwrap().old = true;
    let queue = start(&control);
    let batch = |ids: [&str; 2]| {
        ids.map(|id| {
            let (asked, answer) = asked(PickKind::Decode, id, "m", 0);
            queue.send(asked).unwrap();
            answer
        })
    };
    for answer in batch(["a", "b"]) {
        answer.await.unwrap().expect("picked one by one");
    }
    control.inner.lock().unwrap().old = false;
    // Within the minute the queue does not ask again.
    for answer in batch(["c", "d"]) {
        answer.await.unwrap().expect("picked one by one");
    }
    tokio::time::advance(OLD_CONTROL_RETRY).await;
    for answer in batch(["e", "f"]) {
        answer.await.unwrap().expect("picked together");
    }
    let seen = control.inner.lock().unwrap();
    let one = |id: &str| Call::One(PickKind::Decode, id.into());
    let many = Call::Many(vec![(PickKind::Decode, "e".into()), (PickKind::Decode, "f".into())]);
    assert_eq!(seen.calls, vec![one("a"), one("b"), one("c"), one("d"), many]);
}

#[tokio::test]
async fn a_failed_call_fails_every_pick_it_carried_with_its_status() {
    let control = Control::default();
    control.inner.lock().unwrap().down = true;
    let queue = start(&control);
    let answers: Vec<Answer> = ["a", "b"]
        .into_iter()
        .map(|id| {
            let (asked, answer) = asked(PickKind::Prefill, id, "m", 0);
            queue.send(asked).unwrap();
            answer
        })
        .collect();
    for answer in answers {
        let failed = answer.await.unwrap().expect_err("control is down");
        assert_eq!((failed.code(), StatusReason::of(&failed).known()), (Code::Unavailable, None));
    }
}

#[tokio::test]
async fn a_pick_nobody_waits_for_is_not_sent() {
    let control = Control::default();
    let queue = start(&control);
    let (gone, gone_answer) = asked(PickKind::Decode, "gone", "m", 0);
    let (a, a_answer) = asked(PickKind::Decode, "a", "m", 0);
    drop(gone_answer);
    queue.send(gone).unwrap();
    queue.send(a).unwrap();
    assert_eq!(reservation(a_answer.await.unwrap()), "r-a");
    assert_eq!(control.inner.lock().unwrap().calls, vec![Call::One(PickKind::Decode, "a".into())]);
}

#[tokio::test]
async fn a_batch_stops_at_its_size_and_byte_limits_and_keeps_the_order() {
    let control = Control::default();
    let queue = start(&control);
    // 300 small picks, then 100 of 2,000 pages (16 KiB each): every one is answered, in order,
    // in calls no larger than the limits.
    let mut answers = Vec::new();
    for n in 0..400 {
        let pages = if n < 300 { 0 } else { 2000 };
        let (asked, answer) = asked(PickKind::Prefill, &n.to_string(), "m", pages);
        queue.send(asked).unwrap();
        answers.push(answer);
    }
    for (n, answer) in answers.into_iter().enumerate() {
        assert_eq!(reservation(answer.await.unwrap()), format!("r-{n}"));
    }
    let seen = control.inner.lock().unwrap();
    let sizes: Vec<usize> = seen
        .calls
        .iter()
        .map(|c| match c {
            Call::Many(picks) => picks.len(),
            Call::One(..) => 1,
        })
        .collect();
    // 256 (the most one call carries); 44 small and the 66 large that pass a MiB; the rest.
    assert_eq!(sizes, vec![MAX_BATCH, 110, 34]);
    assert_eq!(seen.batches, sizes, "every batch is counted");
    let ids: Vec<String> = seen
        .calls
        .iter()
        .flat_map(|c| match c {
            Call::Many(picks) => picks.iter().map(|(_, id)| id.clone()).collect(),
            Call::One(_, id) => vec![id.clone()],
        })
        .collect();
    assert_eq!(ids, (0..400).map(|n: i32| n.to_string()).collect::<Vec<_>>(), "control sees them in order");
}
