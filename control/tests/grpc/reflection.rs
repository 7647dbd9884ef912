//! Server reflection answers in both protocol versions (grpcurl 1.8 speaks v1alpha, newer
//! clients v1) and lists the services control serves.

use tonic_reflection::pb::{v1, v1alpha};

use crate::harness::*;

const SERVICES: [&str; 3] = ["grpc.health.v1.Health", "infera.control.v1.Admin", "infera.control.v1.Router"];

#[tokio::test]
async fn reflection_v1_and_v1alpha_list_the_services() {
    let control = Control::start(&pd_workers(1), &[]).await;

    let mut client = v1::server_reflection_client::ServerReflectionClient::new(control.channel().await);
    let ask = v1::ServerReflectionRequest {
        host: String::new(),
        message_request: Some(v1::server_reflection_request::MessageRequest::ListServices(String::new())),
    };
    let mut answers = client.server_reflection_info(tokio_stream::iter([ask])).await.unwrap().into_inner();
    let answer = answers.message().await.unwrap().expect("one answer");
    let Some(v1::server_reflection_response::MessageResponse::ListServicesResponse(list)) =
        answer.message_response
    else {
        panic!("not a service list: {answer:?}")
    };
    let names: Vec<String> = list.service.into_iter().map(|s| s.name).collect();
    for service in SERVICES {
        assert!(names.iter().any(|n| n == service), "v1 lists {service}: {names:?}");
    }

    let mut client = v1alpha::server_reflection_client::ServerReflectionClient::new(control.channel().await);
    let ask = v1alpha::ServerReflectionRequest {
        host: String::new(),
        message_request: Some(v1alpha::server_reflection_request::MessageRequest::FileContainingSymbol(
            "infera.control.v1.Admin".into(),
        )),
    };
    let mut answers = client.server_reflection_info(tokio_stream::iter([ask])).await.unwrap().into_inner();
    let answer = answers.message().await.unwrap().expect("one answer");
    let Some(v1alpha::server_reflection_response::MessageResponse::FileDescriptorResponse(files)) =
        answer.message_response
    else {
        panic!("no file descriptors: {answer:?}")
    };
    assert!(!files.file_descriptor_proto.is_empty(), "v1alpha describes the Admin service");
    control.stop().await;
}
