use super::*;

fn kit_decode() -> PoolInputs {
    PoolInputs {
        heuristic: HeuristicFlags {
            mode: DisaggregationMode::Decode,
            tp_size: 8,
            attn_dp_size: 8,
            max_running_requests: None,
            speculative_num_draft_tokens: Some(6),
            chunked_prefill_size: 8192,
            cuda_graph_max_bs_decode: None,
        },
        mem_fraction_static: None,
        max_total_tokens: None,
        page_size: 64,
        speculative: true,
        context_length: 1 << 20,
    }
}

#[test]
fn glm_5_2_on_an_mi355x_holds_about_two_million_tokens_per_decode_rank() {
    let model = ModelParams::default();
    assert_eq!(model.cell_bytes(true), 79 * 1284, "78 layers + the NextN layer");
    assert_eq!(model.cell_bytes(false), 100_152);
    let (pool, warnings) = size(&model, &DeviceParams::default(), &kit_decode()).unwrap();
    assert!(warnings.is_empty(), "{warnings:?}");
    assert_eq!(pool.mem_fraction_static, 0.913);
    // 288 × 0.913 − 71.76 = 191.184 GiB over 101,436 bytes, in pages of 64.
    assert_eq!(pool.max_total_num_tokens, 2_023_744);
    assert_eq!(pool.max_total_num_tokens % 64, 0);
    assert!((pool.kv_cache_gib - 191.18).abs() < 0.01, "{}", pool.kv_cache_gib);
    // 2,023,744 / 1,048,576 × 512 = 988 → raised to 2048.
    assert_eq!(pool.max_running_requests, 2048);
    assert_eq!(pool.max_req_input_len, (1 << 20) - 1 - 5);
    // The decode study's steady load, 1.6 M tokens on a rank:
    let usage = 1.6e6 / pool.max_total_num_tokens as f64;
    assert!((0.78..0.80).contains(&usage), "{usage}");
}

#[test]
fn max_total_tokens_caps_the_pool_but_never_raises_it() {
    let model = ModelParams::default();
    let device = DeviceParams::default();
    let (pool, warnings) =
        size(&model, &device, &PoolInputs { max_total_tokens: Some(100_000), page_size: 1, ..kit_decode() })
            .unwrap();
    assert_eq!((pool.max_total_num_tokens, pool.profiled_tokens), (100_000, 2_023_761));
    assert_eq!(warnings.len(), 1, "fewer tokens than the context: {warnings:?}");
    let (pool, warnings) =
        size(&model, &device, &PoolInputs { max_total_tokens: Some(2_400_000), ..kit_decode() }).unwrap();
    assert_eq!(pool.max_total_num_tokens, 2_023_744, "SGLang keeps the profiled value");
    assert!(warnings[0].contains("larger than the profiled value 2023744"), "{warnings:?}");
    // Page-aligned down, as calculate_pool_sizes_from_max_tokens does.
    let (pool, _) =
        size(&model, &device, &PoolInputs { max_total_tokens: Some(1000), ..kit_decode() }).unwrap();
    assert_eq!(pool.max_total_num_tokens, 960);
}

#[test]
fn the_fraction_flag_and_its_limits() {
    let model = ModelParams::default();
    let device = DeviceParams::default();
    let at = |f: f64| size(&model, &device, &PoolInputs { mem_fraction_static: Some(f), ..kit_decode() });
    let (pool, _) = at(0.85).unwrap();
    assert_eq!(pool.mem_fraction_static, 0.85);
    assert!(pool.max_total_num_tokens < 2_023_744);
    match at(0.2) {
        Err(PoolError::NoRoom { minimum, .. }) => assert!((minimum - 71.76 / 288.0).abs() < 1e-9),
        other => panic!("{other:?}"),
    }
    assert_eq!(at(1.5), Err(PoolError::Fraction(1.5)));
}

#[test]
fn running_requests_follow_the_pool_and_the_flag() {
    // The CPU worker of the comparison: 20,000 tokens, context 4096 → 2500.
    assert_eq!(max_running_requests(20_000, 4096, None, 1), 2500);
    assert_eq!(max_running_requests(61_509_722, 4096, None, 1), 4096);
    assert_eq!(max_running_requests(1000, 4096, None, 1), 500, "at most half the pool");
    assert_eq!(max_running_requests(2_000_000, 202_752, Some(256), 8), 32);
    assert_eq!(max_running_requests(2_000_000, 202_752, Some(4), 8), 1);
}
