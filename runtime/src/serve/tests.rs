//! The accept loop's tests: stop and drain, both HTTP versions, and the connection limits.

use std::sync::Arc;

use http_body_util::{BodyExt, Empty, Full};
use hyper::body::Bytes;
use hyper_util::client::legacy::Client;
use tokio::sync::Notify;

use super::*;
use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};

#[tokio::test]
async fn a_stopped_server_refuses_new_connections_and_finishes_what_it_serves() {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let (fire, fired) = tokio::sync::oneshot::channel::<()>();
    let stop = Stop::on(async move {
        let _ = fired.await;
    });
    // `/slow` says when it has arrived, then answers only once let go.
    let (arrived, let_go) = (Arc::new(Notify::new()), Arc::new(Notify::new()));
    let handler = {
        let (arrived, let_go) = (arrived.clone(), let_go.clone());
        move |req: Request<Incoming>| {
            let (arrived, let_go) = (arrived.clone(), let_go.clone());
            async move {
                if req.uri().path() == "/slow" {
                    arrived.notify_one();
                    let_go.notified().await;
                }
                Response::new(Full::new(Bytes::from(req.uri().path().to_owned())))
            }
        }
    };
    let listening = Listening::new(ConnLimits::DEFAULT);
    let server = tokio::spawn(serve_http(listener, Plain, handler, stop.wait(), Drain::Unbounded, listening));
    let client = Client::builder(TokioExecutor::new()).build_http::<Empty<Bytes>>();
    let get = |path: &str| client.get(format!("http://{addr}{path}").parse().unwrap());
    let body = get("/fast").await.unwrap().into_body().collect().await.unwrap().to_bytes();
    assert_eq!(body, "/fast");
    let slow = tokio::spawn(get("/slow"));
    arrived.notified().await;
    fire.send(()).unwrap();
    stop.wait().await;
    let_go.notify_one();
    let answered = slow.await.unwrap().unwrap().into_body().collect().await.unwrap().to_bytes();
    assert_eq!(answered, "/slow", "an open request finishes after the stop");
    server.await.unwrap();
    assert!(tokio::net::TcpStream::connect(addr).await.is_err(), "the listener is closed");
    // A late clone of the signal sees the stop too.
    stop.clone().wait().await;
}

#[tokio::test]
async fn both_http_versions_are_served_and_a_silent_connection_does_not_hold_up_the_stop() {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let (fire, fired) = tokio::sync::oneshot::channel::<()>();
    let handler = |req: Request<Incoming>| async move {
        Response::new(Full::new(Bytes::from(format!("{:?}", req.version()))))
    };
    let stop = async move {
        let _ = fired.await;
    };
    let listening = Listening::new(ConnLimits::DEFAULT);
    let server = tokio::spawn(serve_http(listener, Plain, handler, stop, Drain::Unbounded, listening));
    let http1 = Client::builder(TokioExecutor::new()).build_http::<Empty<Bytes>>();
    let http2 = Client::builder(TokioExecutor::new()).http2_only(true).build_http::<Empty<Bytes>>();
    let url: hyper::Uri = format!("http://{addr}/").parse().unwrap();
    for (client, version) in [(&http1, "HTTP/1.1"), (&http2, "HTTP/2.0")] {
        let resp = client.get(url.clone()).await.unwrap();
        assert_eq!(resp.into_body().collect().await.unwrap().to_bytes(), version);
    }

    // HTTP/2's preface in two writes: whether the peek saw a part of it (hyper-util then
    // reads the rest) or all of it, the server answers with its SETTINGS frame.
    let mut split = TcpStream::connect(addr).await.unwrap();
    split.set_nodelay(true).unwrap();
    split.write_all(&version::H2_PREFACE[..10]).await.unwrap();
    tokio::task::yield_now().await;
    split.write_all(&version::H2_PREFACE[10..]).await.unwrap();
    // An empty SETTINGS frame: length 0, type 4, no flags, stream 0.
    split.write_all(&[0, 0, 0, 4, 0, 0, 0, 0, 0]).await.unwrap();
    let mut head = [0u8; 9];
    split.read_exact(&mut head).await.unwrap();
    assert_eq!(head[3], 4, "the server's first frame is SETTINGS: {head:?}");
    // (It could not answer the PING of HTTP/2's graceful close.)
    drop(split);

    // A connection that never sends a byte is closed at the stop. The listener accepts in
    // order: once a connection made after it is answered, it has been accepted.
    let mut silent = TcpStream::connect(addr).await.unwrap();
    let fresh = Client::builder(TokioExecutor::new()).build_http::<Empty<Bytes>>();
    assert!(fresh.get(url).await.unwrap().status().is_success());
    fire.send(()).unwrap();
    tokio::time::timeout(Duration::from_secs(10), server)
        .await
        .expect("the stop is not held up by a silent connection")
        .unwrap();
    assert_eq!(silent.read(&mut [0u8; 1]).await.unwrap(), 0, "closed without an answer");
}

/// A server on port 0 with `limits`, answering every request with 200; its address.
async fn limited(limits: ConnLimits) -> (std::net::SocketAddr, Arc<Gate>) {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let listening = Listening::new(limits);
    let gate = listening.gate.clone();
    let handler = |_req: Request<Incoming>| async move { Response::new(Full::new(Bytes::from("ok"))) };
    tokio::spawn(serve_http(listener, Plain, handler, std::future::pending(), Drain::Unbounded, listening));
    (addr, gate)
}

/// Reads until the peer closes (`Ok(bytes read)`), or fails after `within`.
async fn closed_within(s: &mut TcpStream, within: Duration) -> Result<usize, &'static str> {
    let mut total = 0;
    let mut buf = [0u8; 1024];
    tokio::time::timeout(within, async {
        loop {
            match s.read(&mut buf).await {
                Ok(0) | Err(_) => return total,
                Ok(n) => total += n,
            }
        }
    })
    .await
    .map_err(|_| "still open")
}

#[tokio::test]
async fn a_slow_loris_a_silent_socket_and_an_idle_keep_alive_are_closed_at_the_header_deadline() {
    let limits = ConnLimits { header_read: Duration::from_millis(300), ..ConnLimits::DEFAULT };
    let (addr, gate) = limited(limits).await;
    // Half a request line, then nothing.
    let mut loris = TcpStream::connect(addr).await.unwrap();
    loris.write_all(b"POST /v1/chat/compl").await.unwrap();
    // Nothing at all.
    let mut silent = TcpStream::connect(addr).await.unwrap();
    // A whole request, answered, then the connection kept alive and idle.
    let mut idle = TcpStream::connect(addr).await.unwrap();
    idle.write_all(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n").await.unwrap();
    for (name, s) in [("loris", &mut loris), ("silent", &mut silent)] {
        assert!(closed_within(s, Duration::from_secs(5)).await.is_ok(), "{name} is closed");
    }
    let answered = closed_within(&mut idle, Duration::from_secs(5)).await.expect("idle is closed");
    assert!(answered > 0, "the request before the idle wait was answered");
    // Every place is free again.
    tokio::time::timeout(Duration::from_secs(5), async {
        while gate.counts().open != 0 {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    })
    .await
    .expect("no connection left open");
}

#[tokio::test]
async fn past_the_connection_cap_a_client_is_closed_at_once_and_counted() {
    let limits = ConnLimits { max_connections: 2, ..ConnLimits::DEFAULT };
    let (addr, gate) = limited(limits).await;
    let client = Client::builder(TokioExecutor::new()).build_http::<Empty<Bytes>>();
    let url: hyper::Uri = format!("http://{addr}/").parse().unwrap();
    let _held = [TcpStream::connect(addr).await.unwrap(), TcpStream::connect(addr).await.unwrap()];
    let mut third = TcpStream::connect(addr).await.unwrap();
    assert_eq!(closed_within(&mut third, Duration::from_secs(5)).await, Ok(0), "closed unanswered");
    assert!(gate.counts().refused >= 1, "{:?}", gate.counts());
    drop(_held);
    // The places free as the server sees the two go; then a request is served again.
    let served = tokio::time::timeout(Duration::from_secs(5), async {
        loop {
            if let Ok(r) = client.get(url.clone()).await {
                return r.status();
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    })
    .await
    .expect("served once places are free");
    assert!(served.is_success());
}

#[tokio::test]
async fn a_grpc_listener_is_closed_the_moment_its_incoming_stream_is_dropped() {
    use tokio_stream::StreamExt as _;
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let mut incoming = grpc::plain(listener, Listening::new(ConnLimits::DEFAULT));
    let mut client = TcpStream::connect(addr).await.unwrap();
    client.write_all(b"PRI").await.unwrap();
    let served = tokio::time::timeout(Duration::from_secs(5), incoming.next()).await.expect("accepted");
    assert!(served.is_some_and(|c| c.is_ok()), "the connection comes out once it has spoken");
    // A restarted server binds the same port right away: nothing else holds the listener.
    drop(incoming);
    TcpListener::bind(addr).await.expect("the port is free once the stream is gone");
}
