//! The monitor: invariants 1 (no needless replacement) and 3 (no lasting partial group),
//! checked continuously while the schedule runs.

#[allow(unused_imports)]
use super::*;

#[derive(Debug)]
pub(crate) struct Group {
    pub(crate) uids: BTreeSet<String>,
    pub(crate) pods: Vec<String>,
    pub(crate) epoch: String,
    /// Being replaced: `Some(true)` under a warrant, `Some(false)` without one.
    pub(crate) replacing: Option<bool>,
}

#[derive(Debug)]
pub(crate) struct Tracked {
    pub(crate) def: ClusterDef,
    pub(crate) groups: BTreeMap<u32, Group>,
    /// Pending warrants: a replica (independent) or the whole job (`None`, multislice).
    pub(crate) warrants: Vec<Option<u32>>,
    pub(crate) failures_injected: u32,
    /// Whole groups that took the place of a replaced one, under a warrant / without one.
    pub(crate) replacements: u32,
    pub(crate) needless_replacements: u32,
    /// One line per group disturbed without a warrant.
    pub(crate) needless: Vec<String>,
    pub(crate) partial: BTreeMap<u32, Partial>,
}

/// A replica seen partial: since when, and for how much of that time an operator led.
#[derive(Debug)]
pub(crate) struct Partial {
    pub(crate) since: Instant,
    pub(crate) led: Duration,
    pub(crate) reported: bool,
}

impl Tracked {
    pub(crate) fn busy(&self) -> bool {
        !self.warrants.is_empty() || self.groups.values().any(|g| g.replacing.is_some())
    }
}

pub(crate) struct Monitor {
    pub(crate) t0: Instant,
    pub(crate) clusters: Vec<Tracked>,
    /// What the monitor saw happen, for the diagnosis.
    pub(crate) log: Vec<String>,
    pub(crate) last_poll: Option<Instant>,
    /// Longest partial replica: wall-clock, and while an operator led.
    pub(crate) longest_partial: Duration,
    pub(crate) longest_partial_led: Duration,
    /// Partial replicas that persisted beyond the settling window.
    pub(crate) partial_violations: Vec<String>,
    pub(crate) polls: u64,
}

impl Monitor {
    pub(crate) fn new(t0: Instant, pods: &[PodView]) -> Monitor {
        let clusters = CLUSTERS
            .iter()
            .map(|def| {
                let mut groups = BTreeMap::new();
                for r in 0..def.replicas {
                    let mine: Vec<&PodView> = pods
                        .iter()
                        .filter(|p| p.cluster == def.name && p.replica == Some(r))
                        .filter(|p| p.running())
                        .collect();
                    assert!(
                        whole(&mine),
                        "{} replica {r} is not whole at the start",
                        def.name
                    );
                    groups.insert(
                        r,
                        Group {
                            uids: mine.iter().map(|p| p.uid.clone()).collect(),
                            pods: mine.iter().map(|p| p.describe()).collect(),
                            epoch: mine[0].epoch.clone(),
                            replacing: None,
                        },
                    );
                }
                Tracked {
                    def: *def,
                    groups,
                    warrants: Vec::new(),
                    failures_injected: 0,
                    replacements: 0,
                    needless_replacements: 0,
                    needless: Vec::new(),
                    partial: BTreeMap::new(),
                }
            })
            .collect();
        Monitor {
            t0,
            clusters,
            log: Vec::new(),
            last_poll: None,
            longest_partial: Duration::ZERO,
            longest_partial_led: Duration::ZERO,
            partial_violations: Vec::new(),
            polls: 0,
        }
    }

    pub(crate) fn at(&self, now: Instant) -> String {
        format!("t={:.1}s", now.duration_since(self.t0).as_secs_f64())
    }

    /// One look at the pods; `leading`: an operator leads with synced caches.
    pub(crate) fn poll(&mut self, pods: &[PodView], now: Instant, leading: bool) {
        self.polls += 1;
        let at = self.at(now);
        let since_last = self
            .last_poll
            .replace(now)
            .map_or(Duration::ZERO, |t| now.duration_since(t));
        let log = &mut self.log;
        for c in &mut self.clusters {
            let mine: Vec<&PodView> = pods.iter().filter(|p| p.cluster == c.def.name).collect();
            let by_uid: BTreeMap<&str, &PodView> =
                mine.iter().map(|p| (p.uid.as_str(), *p)).collect();

            // 1. A settled group is disturbed when one of its pods is gone, being deleted or
            // terminal (failed).
            let mut disturbed: BTreeMap<u32, Vec<String>> = BTreeMap::new();
            for (r, g) in &c.groups {
                if g.replacing.is_some() {
                    continue;
                }
                let what: Vec<String> = g
                    .uids
                    .iter()
                    .filter_map(|uid| match by_uid.get(uid.as_str()) {
                        None => Some(format!("uid {} gone", short(uid))),
                        Some(p) if p.terminating || p.terminal() => Some(p.describe()),
                        Some(_) => None,
                    })
                    .collect();
                if !what.is_empty() {
                    disturbed.insert(*r, what);
                }
            }
            let multislice = c.def.membership == Membership::Multislice;
            if multislice
                && !disturbed.is_empty()
                && let Some(i) = c.warrants.iter().position(Option::is_none)
            {
                c.warrants.remove(i);
                for g in c.groups.values_mut() {
                    g.replacing = Some(true);
                }
                log.push(format!(
                    "{at} {}: every group being replaced, under a warrant ({})",
                    c.def.name,
                    disturbed
                        .values()
                        .flatten()
                        .cloned()
                        .collect::<Vec<_>>()
                        .join("; ")
                ));
                disturbed.clear();
            }
            for (r, what) in disturbed {
                let warranted = c.warrants.iter().position(|w| *w == Some(r));
                let g = c.groups.get_mut(&r).expect("group");
                match warranted {
                    Some(i) => {
                        c.warrants.remove(i);
                        g.replacing = Some(true);
                        log.push(format!(
                            "{at} {} replica {r} being replaced, under a warrant ({})",
                            c.def.name,
                            what.join("; ")
                        ));
                    }
                    None => {
                        g.replacing = Some(false);
                        let line = format!(
                            "{at} {} replica {r} (epoch {}) disturbed without a warrant: {}; the group was [{}]",
                            c.def.name,
                            g.epoch,
                            what.join("; "),
                            g.pods.join("; ")
                        );
                        log.push(format!("NEEDLESS: {line}"));
                        c.needless.push(line);
                    }
                }
            }

            // A group being replaced settles once a whole group of new pods runs.
            for (r, g) in c.groups.iter_mut() {
                let Some(warranted) = g.replacing else {
                    continue;
                };
                let live: Vec<&PodView> = mine
                    .iter()
                    .copied()
                    .filter(|p| p.replica == Some(*r) && !p.terminating && !p.terminal())
                    .collect();
                let fresh = live.iter().all(|p| !g.uids.contains(&p.uid));
                if whole(&live) && fresh && live.iter().all(|p| p.running()) {
                    g.uids = live.iter().map(|p| p.uid.clone()).collect();
                    g.pods = live.iter().map(|p| p.describe()).collect();
                    g.epoch = live[0].epoch.clone();
                    g.replacing = None;
                    log.push(format!(
                        "{at} {} replica {r} whole and running again, epoch {}: [{}]",
                        c.def.name,
                        g.epoch,
                        g.pods.join("; ")
                    ));
                    if warranted {
                        c.replacements += 1;
                    } else {
                        c.needless_replacements += 1;
                    }
                }
            }

            // 3. Partial replicas: some but not all of the hosts, counting every pod that is
            // not terminating.
            let mut replicas: BTreeMap<u32, Vec<&PodView>> = BTreeMap::new();
            for p in mine.iter().copied().filter(|p| !p.terminating) {
                replicas
                    .entry(p.replica.unwrap_or(u32::MAX))
                    .or_default()
                    .push(p);
            }
            c.partial.retain(|r, p| {
                let still = replicas.get(r).is_some_and(|ps| !whole(ps));
                if !still {
                    log.push(format!(
                        "{at} {} replica {r} no longer partial (partial for {:.1}s, {:.1}s of it with a leader)",
                        c.def.name,
                        now.duration_since(p.since).as_secs_f64(),
                        p.led.as_secs_f64()
                    ));
                }
                still
            });
            for (r, ps) in &replicas {
                if whole(ps) {
                    continue;
                }
                let describe = || {
                    ps.iter()
                        .map(|p| p.describe())
                        .collect::<Vec<_>>()
                        .join("; ")
                };
                // Time counts from the first poll that saw it partial.
                let seen_before = c.partial.contains_key(r);
                let p = c.partial.entry(*r).or_insert_with(|| {
                    log.push(format!(
                        "{at} {} replica {r} partial: {}",
                        c.def.name,
                        describe()
                    ));
                    Partial {
                        since: now,
                        led: Duration::ZERO,
                        reported: false,
                    }
                });
                if leading && seen_before {
                    p.led += since_last;
                }
                self.longest_partial = self.longest_partial.max(now.duration_since(p.since));
                self.longest_partial_led = self.longest_partial_led.max(p.led);
                if p.led > SETTLE && !p.reported {
                    p.reported = true;
                    self.partial_violations.push(format!(
                        "{} replica {r} partial for {:.1}s with an operator leading (since t={:.1}s): {}",
                        c.def.name,
                        p.led.as_secs_f64(),
                        p.since.duration_since(self.t0).as_secs_f64(),
                        describe()
                    ));
                }
            }
        }
    }

    pub(crate) fn tracked(&self, name: &str) -> &Tracked {
        self.clusters
            .iter()
            .find(|c| c.def.name == name)
            .expect("tracked")
    }

    pub(crate) fn tracked_mut(&mut self, name: &str) -> &mut Tracked {
        self.clusters
            .iter_mut()
            .find(|c| c.def.name == name)
            .expect("tracked")
    }
}

pub(crate) fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

/// The operator processes running now (kept up to date by the schedule).
pub(crate) type Processes = Mutex<Vec<Arc<Replica>>>;

/// Does an operator lead with synced caches?
pub(crate) fn leading(processes: &Processes) -> bool {
    lock(processes).iter().any(|c| c.is_leader() && c.synced())
}

pub(crate) async fn monitor_loop(
    monitor: &Mutex<Monitor>,
    processes: &Processes,
    emu: &Emulator,
    namespace: &str,
    done: &AtomicBool,
) {
    while !done.load(Ordering::Relaxed) {
        let pods = store_pods(emu, namespace);
        let leading = leading(processes);
        lock(monitor).poll(&pods, Instant::now(), leading);
        tokio::time::sleep(POLL).await;
    }
}
