"""What stands up around the benchmark, not the benchmark: the one-host Ceph (ceph), the fast-device stand-in
(fastdev), both keeping one kind of journal of what they made (journal), and the first GPU run (smoke/)."""
