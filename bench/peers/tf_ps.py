"""Peer: the classic TF 1 parameter-server recipe, written by hand without adrun.

Between-graph replication: every task runs this script with the same cluster and its own role.
Variables go to the PS tasks by `replica_device_setter` (round-robin over several PSs), gradients
are averaged by `SyncReplicasOptimizer` (every worker's gradient in every update), and the workers
train in a `MonitoredTrainingSession` on their `tf.distribute.Server`:

    python bench/peers/tf_ps.py --workload sparse --ps-hosts h0:2222 --worker-hosts h1:2222,h2:2222 \\
        --job-name worker --task-index 0 --steps 200 --warmup 20 --result-file out/w{worker}.json

Timing is fair to the recipe and checked:
- all workers meet at a barrier (queues on PS 0) before the first step and again before the timed
  steps, so no worker trains alone on the others' tokens while they still wait for the chief's
  initialization;
- the train op returns the global step its update produced; every timed step must return the next
  one, else a worker's gradient was dropped as stale or one worker filled an update twice, and the
  run fails instead of reporting that speed;
- each worker reports its own examples; the benchmark adds the workers up.
The PS tasks exit once every worker has said it is done (a token each in a queue on every PS),
instead of `server.join()` forever.
"""

from __future__ import annotations

import sys
import time

import numpy as np
import tensorflow as tf

from peer_args import host_list, parse_peer_args

from harness import input_dataset, write_result
from models import graph_loss

tf1 = tf.compat.v1
tf1.disable_eager_execution()

CHIEF_INIT_POLL_S = 0.5
CHIEF_INIT_TIMEOUT_S = 600


def add_cluster_arguments(parser) -> None:
    parser.add_argument("--ps-hosts", required=True, help="host:port,... of the PS tasks")
    parser.add_argument("--worker-hosts", required=True, help="host:port,... of the workers (task 0 is the chief)")
    parser.add_argument("--job-name", choices=["ps", "worker"], required=True)
    parser.add_argument("--task-index", type=int, required=True)


def done_queue(ps_task: int, num_workers: int) -> tf1.FIFOQueue:
    with tf1.device(f"/job:ps/task:{ps_task}"):
        return tf1.FIFOQueue(num_workers, tf.int32, shapes=[[]], shared_name=f"done_ps{ps_task}", name=f"done_ps{ps_task}")


def barrier_op(name: str, worker: int, num_workers: int) -> tf.Operation:
    """Returns when every worker has run its own copy: each worker has a queue on PS 0, tells every
    other worker's queue it arrived and takes one token from each other worker off its own."""
    with tf1.device("/job:ps/task:0"):
        queues = [tf1.FIFOQueue(num_workers, tf.int32, shapes=[[]], shared_name=f"{name}_w{w}", name=f"{name}_w{w}")
                  for w in range(num_workers)]
    arrived = [queue.enqueue(worker) for w, queue in enumerate(queues) if w != worker]
    with tf.control_dependencies(arrived):
        return tf.group(queues[worker].dequeue_many(num_workers - 1)) if num_workers > 1 else tf.no_op()


def wait_for_chief_init(target: str, config: tf1.ConfigProto, uninitialized: tf.Tensor) -> None:
    """A non-chief's MonitoredTrainingSession checks the chief's initialization every 30 s; poll it
    ourselves first, so the session it then makes finds the variables ready at once."""
    with tf1.Session(target, config=config) as sess:
        deadline = time.monotonic() + CHIEF_INIT_TIMEOUT_S
        while len(sess.run(uninitialized)):
            if time.monotonic() > deadline:
                sys.exit(f"tf_ps: the chief did not initialize the variables within {CHIEF_INIT_TIMEOUT_S} s")
            time.sleep(CHIEF_INIT_POLL_S)


def run_ps(server: tf.distribute.Server, task: int, num_workers: int) -> None:
    """Serve until every worker said it is done. The session sees only this task: without the
    filter its master contacts every task of the cluster at once, and a task whose server is not
    listening yet leaves gRPC's channel to it backing off with "Connection refused", which a later
    step's transfer to that task then fails with (seen in 4 of 36 benchmark runs)."""
    take_all = done_queue(task, num_workers).dequeue_many(num_workers)
    with tf1.Session(server.target, config=tf1.ConfigProto(device_filters=[f"/job:ps/task:{task}"])) as sess:
        sess.run(take_all)


def run_worker(args, model, cluster: tf.train.ClusterSpec, server: tf.distribute.Server) -> None:
    worker, num_workers = args.task_index, cluster.num_tasks("worker")
    is_chief = worker == 0
    worker_device = f"/job:worker/task:{worker}"
    with tf1.device(tf1.train.replica_device_setter(worker_device=worker_device, cluster=cluster)):
        global_step = tf1.train.get_or_create_global_step()
        inputs = tf1.data.make_one_shot_iterator(input_dataset(model, args, worker)).get_next()
        loss = graph_loss(model, inputs)
        optimizer = tf1.train.SyncReplicasOptimizer(tf1.train.GradientDescentOptimizer(args.lr),
                                                    replicas_to_aggregate=num_workers, total_num_replicas=num_workers)
        # the op that assigns this worker's next local step: its value is the global step of the update
        train_op = optimizer.minimize(loss, global_step=global_step)
    start_barrier = barrier_op("start_barrier", worker, num_workers)
    timed_barrier = barrier_op("timed_barrier", worker, num_workers)
    end_barrier = barrier_op("end_barrier", worker, num_workers)
    say_done = tf.group([done_queue(ps, num_workers).enqueue(worker) for ps in range(cluster.num_tasks("ps"))])
    variables = tf1.trainable_variables()

    config = tf1.ConfigProto(device_filters=["/job:ps", worker_device])
    if not is_chief:
        wait_for_chief_init(server.target, config, tf1.report_uninitialized_variables(tf1.global_variables()))
    # no initial tokens: the first step waits for the first update too, as every later one does
    # (with the default of one token per worker, a worker's second gradient can arrive stale)
    hooks = [optimizer.make_session_run_hook(is_chief, num_tokens=0)]
    timed = args.steps - args.warmup
    updates: list[int] = []
    with tf1.train.MonitoredTrainingSession(master=server.target, is_chief=is_chief, hooks=hooks, config=config,
                                            save_checkpoint_secs=None, save_summaries_steps=None,
                                            log_step_count_steps=None, stop_grace_period_secs=5) as sess:
        initial = sess.run(variables)
        sess.run(start_barrier)
        for _ in range(args.warmup):
            sess.run(train_op)
        sess.run(timed_barrier)
        first_update = sess.run(global_step) + 1
        start, cpu_start = time.perf_counter(), time.process_time()
        for _ in range(timed):
            updates.append(sess.run(train_op))
        seconds, cpu_seconds = time.perf_counter() - start, time.process_time() - cpu_start
        sess.run(end_barrier)
        final = sess.run(variables)
        final_step = sess.run(global_step)
    if len(updates) < timed:  # MonitoredTrainingSession ends its block quietly on a closed queue (OutOfRange)
        sys.exit(f"tf_ps: worker {worker}: the training session stopped after {len(updates)} of {timed} timed steps "
                 "(another task failed: see its log)")
    with tf1.Session(server.target, config=config) as sess:
        sess.run(say_done)

    expected = list(range(first_update, first_update + timed))
    if updates != expected:
        sys.exit(f"tf_ps: worker {worker}: its timed steps were followed by updates {updates}, expected {expected}: "
                 "not every worker's gradient was in every update")
    print(f"worker {worker}: {timed} timed steps in {seconds:.3f} s, global step {final_step}")
    if args.dump_variables:
        np.savez(args.dump_variables.replace("{worker}", str(worker)), global_step=final_step,
                 **{f"init/{v.op.name}": value for v, value in zip(variables, initial, strict=True)},
                 **{f"final/{v.op.name}": value for v, value in zip(variables, final, strict=True)})
    if args.result_file:
        write_result(args.result_file, args.workload, worker, timed, seconds, args.batch_size, cpu_seconds)


def main() -> None:
    args, model = parse_peer_args(__doc__.splitlines()[0], add_cluster_arguments)
    cluster = tf.train.ClusterSpec({"ps": host_list(args.ps_hosts), "worker": host_list(args.worker_hosts)})
    if not 0 <= args.task_index < cluster.num_tasks(args.job_name):
        sys.exit(f"tf_ps: --task-index {args.task_index} is not a {args.job_name} task of this cluster")
    server = tf.distribute.Server(cluster, job_name=args.job_name, task_index=args.task_index)
    if args.job_name == "ps":
        run_ps(server, args.task_index, cluster.num_tasks("worker"))
    else:
        run_worker(args, model, cluster, server)


if __name__ == "__main__":
    main()
