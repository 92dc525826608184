"""What stands up around the benchmark, not the benchmark: the one-host Ceph (ceph), the fast-device stand-in
(fastdev), both keeping one kind of journal of what they made (journal), a device throttled on purpose
(throttle: a gate's power measured), and the first GPU run (smoke/)."""
