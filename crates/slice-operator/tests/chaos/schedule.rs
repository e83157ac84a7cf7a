//! The schedule: draws faults from the seeded RNG, applies them, and undoes them.

#[allow(unused_imports)]
use super::*;

pub(crate) struct Op {
    pub(crate) handle: OperatorHandle,
    /// Has led at some point (a leader that stops leading has exited).
    pub(crate) led: bool,
}

impl Op {
    pub(crate) fn leads(&self) -> bool {
        self.handle.replica.is_leader()
    }
    pub(crate) fn id(&self) -> String {
        self.handle.replica.config.identity()
    }
}

pub(crate) struct Outcome {
    pub(crate) converged_in: Option<Duration>,
    pub(crate) not_converged: Option<String>,
    pub(crate) operator_exits: u32,
    pub(crate) ops: Vec<OperatorHandle>,
}

pub(crate) struct Schedule<'a> {
    pub(crate) env: &'a Env,
    pub(crate) emu: &'a Emulator,
    pub(crate) monitor: &'a Mutex<Monitor>,
    pub(crate) processes: &'a Processes,
    pub(crate) book: Arc<Mutex<Book>>,
    pub(crate) ops: Vec<Op>,
    pub(crate) rng: Rng,
    pub(crate) tasks: Vec<JoinHandle<()>>,
    /// Since an operator fault: waiting for a leader whose caches have synced.
    pub(crate) awaiting_leader: bool,
    pub(crate) operator_exits: u32,
    pub(crate) warranted: u32,
    pub(crate) warranted_cap: u32,
}

impl<'a> Schedule<'a> {
    pub(crate) fn note(&self, line: impl Display) {
        lock(&self.book).note(line);
    }

    pub(crate) fn leader(&self) -> Option<usize> {
        self.ops.iter().position(Op::leads)
    }

    /// Tells the monitor which processes run now.
    pub(crate) fn publish(&self) {
        *lock(self.processes) = self.ops.iter().map(|o| o.handle.replica.clone()).collect();
    }

    pub(crate) async fn new_process(&self, i: usize) -> Op {
        let handle = self
            .env
            .start_operator_process(i)
            .await
            .expect("emulator mode");
        Op { handle, led: false }
    }

    /// Watches over the operator processes, as their Deployment would: one that stopped
    /// leading has exited (lost its lease) and is started again. Ends an operator fault once
    /// a leader's caches have synced.
    pub(crate) async fn supervise(&mut self) {
        for i in 0..self.ops.len() {
            let leads = self.ops[i].leads();
            if self.ops[i].led && !leads {
                let id = self.ops[i].id();
                self.note(format_args!(
                    "operator {id} stopped leading (exited); starting a new process"
                ));
                let new = self.new_process(i).await;
                let old = std::mem::replace(&mut self.ops[i], new);
                old.handle.kill();
                self.operator_exits += 1;
                self.awaiting_leader = true;
                self.publish();
            } else if leads {
                self.ops[i].led = true;
            }
        }
        if self.awaiting_leader
            && let Some(l) = self.leader()
            && self.ops[l].handle.replica.synced()
        {
            self.awaiting_leader = false;
            let id = self.ops[l].id();
            let mut book = lock(&self.book);
            book.ended();
            book.note(format_args!("{id} leads, caches synced"));
        }
    }

    /// Lets `d` pass, supervising the operators meanwhile.
    pub(crate) async fn tick_for(&mut self, d: Duration) {
        let until = Instant::now() + d;
        loop {
            self.supervise().await;
            let now = Instant::now();
            if now >= until {
                return;
            }
            tokio::time::sleep(POLL.min(until - now)).await;
        }
    }

    pub(crate) fn count(&self, kind: Kind) {
        *lock(&self.book).applied.entry(kind).or_default() += 1;
    }

    pub(crate) async fn step(&mut self, halfway: bool) {
        let roll = self.rng.chance(WARRANTED_CHANCE);
        let force = halfway && self.warranted == 0;
        if self.warranted < self.warranted_cap && (roll || force) && self.pod_failure().await {
            self.count(Kind::PodFailure);
            return;
        }
        let total: usize = WEIGHTS.iter().map(|(_, w)| w).sum();
        for _ in 0..8 {
            let mut x = self.rng.below(total);
            let kind = WEIGHTS
                .iter()
                .find(|(_, w)| {
                    if x < *w {
                        true
                    } else {
                        x -= w;
                        false
                    }
                })
                .map(|(k, _)| *k)
                .expect("weights");
            if self.apply(kind).await {
                self.count(kind);
                return;
            }
        }
        self.emu.faults().drop_watches();
        self.note("dropped every watch (nothing else eligible)");
        lock(&self.book).ended();
        self.count(Kind::DropWatches);
    }

    /// Applies one unwarranted fault; false when it is not possible now.
    pub(crate) async fn apply(&mut self, kind: Kind) -> bool {
        match kind {
            Kind::SigkillLeader => self.restart(true).await,
            Kind::SigtermLeader => self.restart(false).await,
            Kind::Failover => self.failover().await,
            Kind::NodeBlip => self.node_blip(),
            Kind::DevicePlugin => self.device_plugin(),
            Kind::ApiErrors => self.api_errors(),
            Kind::DropWatches => {
                self.emu.faults().drop_watches();
                self.note("dropped every watch");
                lock(&self.book).ended();
                true
            }
            Kind::ExpireResourceVersions => {
                self.emu.faults().expire_resource_versions();
                self.note("expired every resourceVersion (410 Gone, relists)");
                lock(&self.book).ended();
                true
            }
            Kind::PodFailure => false,
        }
    }

    /// SIGKILL (`kill`) or SIGTERM of the leader (of any process while none leads), and a new
    /// process in its place.
    pub(crate) async fn restart(&mut self, kill: bool) -> bool {
        let i = match self.leader() {
            Some(l) => l,
            None => self.rng.below(self.ops.len()),
        };
        let old = self.ops.remove(i);
        self.publish();
        let (id, led) = (old.id(), old.leads());
        let what = if kill { "SIGKILL" } else { "SIGTERM" };
        let role = if led {
            "leader"
        } else {
            "operator (no leader)"
        };
        self.note(format_args!("{what} {role} {id}"));
        if kill {
            old.handle.kill();
        } else {
            let _ = old.handle.stop().await;
        }
        let new = self.new_process(i).await;
        self.note(format_args!("started {}", new.id()));
        self.ops.insert(i, new);
        self.publish();
        self.awaiting_leader = true;
        true
    }

    /// The leader stops (SIGTERM, releasing its lease); the standby must take over; then a
    /// fresh standby is started.
    pub(crate) async fn failover(&mut self) -> bool {
        let Some(l) = self.leader() else {
            return false;
        };
        let old = self.ops.remove(l);
        self.publish();
        let id = old.id();
        self.note(format_args!("failover: stopping leader {id}"));
        let _ = old.handle.stop().await;
        self.awaiting_leader = true;
        // A released lease is taken at the standby's next attempt; an unreleased one (the
        // release failed under injected errors) once it expires.
        let limit = Duration::from_secs(chart_lease_seconds() + 10);
        let since = Instant::now();
        while self.awaiting_leader {
            if since.elapsed() > limit {
                let standby: Vec<String> = self.ops.iter().map(Op::id).collect();
                let line = format!(
                    "failover: no standby ({standby:?}) took over within {limit:?} of {id} stopping"
                );
                self.note(&line);
                lock(&self.book).problems.push(format!("OPERATOR: {line}"));
                break;
            }
            self.supervise().await;
            tokio::time::sleep(POLL).await;
        }
        let new = self.new_process(l).await;
        self.note(format_args!("failover: started standby {}", new.id()));
        self.ops.insert(l, new);
        self.publish();
        true
    }

    pub(crate) fn node_blip(&mut self) -> bool {
        let busy = lock(&self.book).busy_nodes.clone();
        let candidates: Vec<String> = store_nodes(self.emu)
            .into_iter()
            .filter(|n| n.healthy() && !busy.contains(&n.name))
            .map(|n| n.name)
            .collect();
        let Some(node) = self.rng.pick(&candidates) else {
            return false;
        };
        let readiness = if self.rng.chance(0.5) {
            NodeReadiness::Unreachable
        } else {
            NodeReadiness::NotReady
        };
        let hold = self.rng.seconds(0.5, MAX_BLIP);
        {
            let mut book = lock(&self.book);
            book.busy_nodes.insert(node.clone());
            book.note(format_args!(
                "node {node} {readiness:?} for {:.1}s",
                hold.as_secs_f64()
            ));
        }
        let (client, book) = (self.env.client.clone(), self.book.clone());
        self.tasks.push(tokio::spawn(async move {
            let result = node_blip(&client, &node, readiness, hold).await;
            let mut book = lock(&book);
            book.busy_nodes.remove(&node);
            book.ended();
            match result {
                Ok(trouble) => {
                    book.longest_trouble = book.longest_trouble.max(trouble);
                    if trouble > MAX_TROUBLE {
                        book.problems.push(format!(
                            "TEST: node {node} was in trouble for {trouble:?}, too close to the grace"
                        ));
                    }
                    book.note(format_args!(
                        "node {node} Ready, lifecycle taint gone ({:.1}s in trouble)",
                        trouble.as_secs_f64()
                    ));
                }
                Err(e) => {
                    book.note(format_args!("node {node} blip failed: {e}"));
                    book.problems.push(format!("TEST: node blip: {e}"));
                }
            }
        }));
        true
    }

    /// `google.com/tpu` allocatable drops to 0 for 1-3 s (capacity unchanged). Only while no
    /// cluster is being replaced and no pod waits to start: a pod admitted by its kubelet
    /// while the chips are gone fails (`OutOfgoogle.com/tpu`), a real failure that would
    /// warrant a restart, which this schedule does not count.
    pub(crate) fn device_plugin(&mut self) -> bool {
        let pods = store_pods(self.emu, &self.env.namespace);
        let quiet = pods.iter().all(|p| p.terminating || p.running())
            && !lock(self.monitor).clusters.iter().any(Tracked::busy);
        if !quiet {
            return false;
        }
        let busy = lock(&self.book).busy_nodes.clone();
        let candidates: Vec<String> = store_nodes(self.emu)
            .into_iter()
            .filter(|n| n.healthy() && !busy.contains(&n.name))
            .map(|n| n.name)
            .collect();
        let Some(node) = self.rng.pick(&candidates) else {
            return false;
        };
        let hold = self.rng.seconds(1.0, 3.0);
        {
            let mut book = lock(&self.book);
            book.busy_nodes.insert(node.clone());
            book.plugin_faults += 1;
            book.note(format_args!(
                "device plugin of {node} restarts: allocatable {TPU_RESOURCE} 0 for {:.1}s",
                hold.as_secs_f64()
            ));
        }
        let (client, book) = (self.env.client.clone(), self.book.clone());
        self.tasks.push(tokio::spawn(async move {
            let down = retry("allocatable 0", WRITE_DEADLINE, || {
                set_tpu_allocatable(&client, &node, "0")
            })
            .await;
            if down.is_ok() {
                tokio::time::sleep(hold).await; // the fault's length
            }
            let up = retry("allocatable back", WRITE_DEADLINE, || {
                set_tpu_allocatable(&client, &node, CHIPS)
            })
            .await;
            let mut book = lock(&book);
            book.busy_nodes.remove(&node);
            book.plugin_faults -= 1;
            book.plugin_end = Some(Instant::now());
            book.ended();
            match down.and(up) {
                Ok(()) => book.note(format_args!(
                    "device plugin of {node} back: allocatable {CHIPS}"
                )),
                Err(e) => {
                    book.note(format_args!("device plugin fault on {node} failed: {e}"));
                    book.problems.push(format!("TEST: device plugin: {e}"));
                }
            }
        }));
        true
    }

    /// For 1-3 s, 30 % of writes, reads or both are answered 500 or 429.
    pub(crate) fn api_errors(&mut self) -> bool {
        if lock(&self.book).api_errors {
            return false;
        }
        let (what, verbs): (&str, &[Verb]) = match self.rng.below(3) {
            0 => (
                "writes",
                &[Verb::Create, Verb::Update, Verb::Patch, Verb::Delete],
            ),
            1 => ("reads", &[Verb::List, Verb::Get]),
            _ => (
                "writes and reads",
                &[
                    Verb::Create,
                    Verb::Update,
                    Verb::Patch,
                    Verb::Delete,
                    Verb::List,
                    Verb::Get,
                ],
            ),
        };
        let code = if self.rng.chance(0.5) { 500 } else { 429 };
        let hold = self.rng.seconds(1.0, 3.0);
        let faults = self.emu.faults();
        for verb in verbs {
            faults.fail(*verb, ERROR_RATE, code);
        }
        {
            let mut book = lock(&self.book);
            book.api_errors = true;
            book.note(format_args!(
                "API errors: {}% of {what} answered {code} for {:.1}s",
                (ERROR_RATE * 100.0) as u32,
                hold.as_secs_f64()
            ));
        }
        let book = self.book.clone();
        self.tasks.push(tokio::spawn(async move {
            tokio::time::sleep(hold).await; // the fault's length
            faults.clear();
            let mut book = lock(&book);
            book.api_errors = false;
            book.ended();
            book.note(format_args!(
                "API errors cleared ({} injected so far)",
                faults.injected_count()
            ));
        }));
        true
    }

    /// A warranted fault: one running pod of a settled cluster fails. Not while a device
    /// plugin is down or was down a moment ago (the replacement pods must not meet a kubelet
    /// that still sees no chips).
    pub(crate) async fn pod_failure(&mut self) -> bool {
        {
            let book = lock(&self.book);
            let plugin_recent = book
                .plugin_end
                .is_some_and(|t| t.elapsed() < Duration::from_secs(1));
            if book.plugin_faults > 0 || plugin_recent {
                return false;
            }
        }
        let pods = store_pods(self.emu, &self.env.namespace);
        let nodes: BTreeMap<String, NodeView> = store_nodes(self.emu)
            .into_iter()
            .map(|n| (n.name.clone(), n))
            .collect();
        let busy = lock(&self.book).busy_nodes.clone();
        let settled: Vec<ClusterDef> = {
            let monitor = lock(self.monitor);
            CLUSTERS
                .iter()
                .filter(|def| {
                    let live: Vec<&PodView> = pods
                        .iter()
                        .filter(|p| p.cluster == def.name && !p.terminating)
                        .collect();
                    !monitor.tracked(def.name).busy()
                        && live.len() == def.replicas as usize * HOSTS
                        && live.iter().all(|p| p.running())
                })
                .copied()
                .collect()
        };
        let Some(def) = self.rng.pick(&settled) else {
            return false;
        };
        let victims: Vec<PodView> = pods
            .iter()
            .filter(|p| p.cluster == def.name && p.running())
            .filter(|p| {
                nodes.get(&p.node).is_some_and(NodeView::healthy) && !busy.contains(&p.node)
            })
            .cloned()
            .collect();
        let Some(victim) = self.rng.pick(&victims) else {
            return false;
        };
        let warrant = match def.membership {
            Membership::Multislice => None,
            Membership::Independent => victim.replica,
        };
        lock(self.monitor)
            .tracked_mut(def.name)
            .warrants
            .push(warrant);
        self.note(format_args!("WARRANTED: pod {} fails", victim.describe()));
        let (client, ns) = (&self.env.client, self.env.namespace.as_str());
        let result = retry("fail pod", Duration::from_secs(10), || {
            slice_sim::fail_pod(client, ns, &victim.name, 1)
        })
        .await;
        match result {
            Ok(()) => {
                lock(self.monitor).tracked_mut(def.name).failures_injected += 1;
                lock(&self.book).ended();
                self.warranted += 1;
                true
            }
            Err(e) => {
                let mut monitor = lock(self.monitor);
                let warrants = &mut monitor.tracked_mut(def.name).warrants;
                if let Some(i) = warrants.iter().position(|w| *w == warrant) {
                    warrants.remove(i);
                }
                drop(monitor);
                self.note(format_args!("could not fail {}: {e}", victim.name));
                false
            }
        }
    }

    /// Runs the schedule for `length`, undoes what is still active, then waits for
    /// convergence.
    pub(crate) async fn run(mut self, length: Duration) -> Outcome {
        let start = Instant::now();
        while start.elapsed() < length {
            self.step(start.elapsed() >= length / 2).await;
            let pause = self.rng.seconds(0.5, 3.0);
            self.tick_for(pause).await;
        }
        self.note("schedule over; waiting for the active faults to be undone");
        while !self.tasks.iter().all(JoinHandle::is_finished) {
            self.tick_for(POLL).await;
        }
        for task in self.tasks.drain(..) {
            if let Err(e) = task.await {
                lock(&self.book)
                    .problems
                    .push(format!("TEST: a fault task panicked: {e}"));
            }
        }
        let limit = Duration::from_secs(chart_lease_seconds() + 20);
        let since = Instant::now();
        while self.awaiting_leader && since.elapsed() < limit {
            self.tick_for(POLL).await;
        }
        if self.awaiting_leader {
            let line = format!("no operator leads with synced caches {limit:?} after the schedule");
            lock(&self.book).problems.push(format!("OPERATOR: {line}"));
        }
        let last_end = lock(&self.book).last_end;
        self.note("every fault undone; waiting for convergence");

        let mut converged_in = None;
        let mut why = String::new();
        loop {
            self.supervise().await;
            match converged(self.emu, &self.env.namespace, self.monitor) {
                Ok(()) => {
                    converged_in = Some(last_end.elapsed());
                    break;
                }
                Err(e) => why = e,
            }
            if last_end.elapsed() > CONVERGE_DIAGNOSE {
                break;
            }
            tokio::time::sleep(POLL).await;
        }
        if converged_in.is_some() {
            // Settled means settled: nothing more is replaced or counted.
            self.tick_for(QUIET).await;
        }
        Outcome {
            converged_in,
            not_converged: converged_in.is_none().then_some(why),
            operator_exits: self.operator_exits,
            ops: self.ops.into_iter().map(|o| o.handle).collect(),
        }
    }
}
