//! `cargo test -p conformance`: every case of the suite as one test, run as real
//! multi-process jobs (or from outside them) in both matching modes on every
//! transport of the build. The `conformance` binary runs the same cases and prints a
//! summary per transport and mode.

use std::path::Path;

const EXE: &str = env!("CARGO_BIN_EXE_conformance");

fn run(name: &str) {
    conformance::run_everywhere(Path::new(EXE), name);
}

macro_rules! cases {
    ($($name:ident),* $(,)?) => {
        $(
            #[test]
            fn $name() {
                run(stringify!($name));
            }
        )*
        /// Every case of the suite has a test above, and every test names a case.
        #[test]
        fn every_case_has_a_test() {
            let listed: Vec<&str> = vec![$(stringify!($name)),*];
            let cases: Vec<&str> = conformance::all().iter().filter(|c| c.is_test()).map(|c| c.name).collect();
            for c in &cases {
                assert!(listed.contains(c), "case {c} has no #[test] in tests/suite.rs");
            }
            for l in &listed {
                assert!(cases.contains(l), "test {l} names no case");
            }
        }
    };
}

cases!(
    // semantics
    non_overtaking_same_sender,
    non_overtaking_two_receives,
    mpi_example_3_10_order_with_any_tag,
    mpi_example_3_11_bsend_then_ssend_progress,
    wildcards_report_real_source_and_tag,
    standard_small_send_completes_without_receiver,
    synchronous_send_waits_for_the_receive,
    ready_send_with_and_without_posted_receive,
    buffered_send_completes_locally,
    probe_iprobe_and_matched_probe,
    mpi_example_3_18_probe_any_source,
    cancel_receive_exactly_one_outcome,
    cancel_send_exactly_one_outcome,
    truncation_reports_error_and_keeps_prefix,
    zero_length_messages,
    proc_null_completes_at_once,
    sendrecv_shift_with_proc_null_ends,
    sendrecv_replace_ring,
    communicator_isolation_same_tag,
    eager_rendezvous_boundary_sizes,
    message_sizes_0_to_64_mib,
    progress_ssend_vs_irecv_waited_later,
    persistent_requests,
    wait_test_any_some_all_with_inactive,
    derived_datatypes_with_gaps,
    many_to_one_fan_in_four_ranks,
    every_pair_every_protocol_any_size,
    // collectives
    coll_every_collective_and_root_1_rank,
    coll_every_collective_and_root_2_ranks,
    coll_every_collective_and_root_3_ranks,
    coll_every_collective_and_root_4_ranks,
    coll_every_collective_and_root_5_ranks,
    coll_every_collective_and_root_7_ranks,
    coll_every_collective_and_root_8_ranks,
    coll_user_operations_1_rank,
    coll_user_operations_2_ranks,
    coll_user_operations_3_ranks,
    coll_user_operations_4_ranks,
    coll_user_operations_5_ranks,
    coll_user_operations_7_ranks,
    coll_user_operations_8_ranks,
    coll_predefined_ops_every_type_3_ranks,
    coll_predefined_op_on_a_wrong_type_aborts_naming_the_call,
    coll_job_fails_when_every_rank_aborts_at_once,
    coll_large_messages_2_ranks,
    coll_large_messages_5_ranks,
    coll_large_messages_8_ranks,
    coll_split_dup_cartesian_with_user_traffic_6_ranks,
    coll_immediate_outstanding_reordered_and_progress_4_ranks,
    coll_in_place_with_user_operations_4_ranks,
    coll_immediate_user_ops_completed_in_different_orders_4_ranks,
    // bad input
    bad_rank_and_tag_are_reported,
    bad_count_and_small_buffer_are_reported,
    bad_datatype_and_request_use_are_reported,
    calls_after_finalize_and_double_init_fail,
    // faults and security
    fault_rank_panics_mid_transfer,
    fault_rank_sigkilled_mid_transfer,
    // one-sidedness
    one_sided_send_completes_while_receiver_stopped,
    transport_verbs_or_a_fallback_line,
    fault_rank_killed_from_outside_mid_transfer,
    peer_stops_polling_loses_nothing,
    security_mapped_segments_are_0600,
    security_segment_file_is_0600_while_it_exists,
    security_remote_write_is_bounded_by_the_advertised_buffer,
    security_foreign_process_cannot_join,
    security_pmi_port_survives_malformed_and_oversized_input,
    security_local_ranks_get_a_private_socket_not_a_listener,
    // soak and the checks of its checkers
    soak_short_2_3_4_ranks,
    checkers_catch_reordering_loss_duplication_corruption,
    soak_catches_injected_transport_faults,
);
