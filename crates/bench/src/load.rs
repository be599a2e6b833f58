//! The load models of `kasi bench`, as pure functions of time.
//!
//! A [`Plan`] is a level that starts at `start_target` and moves linearly
//! through its stages, as k6's ramping executors do: the level is virtual
//! users (closed loop: each user starts its next flow when the last one
//! ended) or arrivals per second (open loop: flows start on a schedule
//! whatever is in flight, so a slow hub shows as latency, not as a lower
//! offered load). The named profiles are the test types of Mojaloop's
//! characterization (seed 001), shaped after k6's guides. `breakpoint` is
//! not a plan but a search: see [`Breakpoint`].

use std::fmt;

use clap::ValueEnum;

/// One stage: the level moves linearly to `target` over `duration_s`.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Stage {
    pub duration_s: f64,
    pub target: f64,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Load {
    /// The level is virtual users.
    Closed,
    /// The level is arrivals per second.
    Open,
}

impl Load {
    pub fn name(self) -> &'static str {
        match self {
            Load::Closed => "closed",
            Load::Open => "open",
        }
    }
}

/// The test types of seed 001.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum Profile {
    /// A minimal load (2 users, or 10 arrivals/s with --rate) for 10 s:
    /// checks that the flow works end to end before anything bigger.
    Smoke,
    /// Ramp up to the level (--concurrency, or --rate) over 20% of the
    /// duration (default 60 s), hold it for 70%, ramp down; the hold is
    /// measured.
    AverageLoad,
    /// As average-load at twice the level.
    Stress,
    /// A quarter of the level, then a sudden rise to four times it, held
    /// briefly, then back down to watch the recovery; all measured.
    Spike,
    /// Open loop, raising the arrival rate step by step (from --rate, or
    /// 500/s, by 25% a step of --step-duration) until the e2e p99 passes --max-p99-ms,
    /// more than --max-error-pct of the flows fail, or the hub completes
    /// under 90% of what was offered; reports the last rate that held.
    Breakpoint,
}

impl Profile {
    pub fn name(self) -> &'static str {
        match self {
            Profile::Smoke => "smoke",
            Profile::AverageLoad => "average-load",
            Profile::Stress => "stress",
            Profile::Spike => "spike",
            Profile::Breakpoint => "breakpoint",
        }
    }

    /// The whole run's length when --duration does not say.
    pub fn default_duration_s(self) -> f64 {
        match self {
            Profile::Smoke => 10.0,
            Profile::AverageLoad | Profile::Stress | Profile::Spike => 60.0,
            // Per step.
            Profile::Breakpoint => 5.0,
        }
    }
}

/// How the level moves over a run, and which part of it is measured.
#[derive(Clone, Debug, PartialEq)]
pub struct Plan {
    pub load: Load,
    pub start_target: f64,
    pub stages: Vec<Stage>,
    /// The measured window, in seconds from the start of the load.
    pub window_from_s: f64,
    pub window_until_s: f64,
}

impl Plan {
    /// A constant level: `warmup_s` unmeasured, then `duration_s` measured.
    pub fn constant(load: Load, level: f64, warmup_s: f64, duration_s: f64) -> Plan {
        Plan {
            load,
            start_target: level,
            stages: vec![Stage {
                duration_s: warmup_s + duration_s,
                target: level,
            }],
            window_from_s: warmup_s,
            window_until_s: warmup_s + duration_s,
        }
    }

    /// Stages from a level of zero (k6's `stages`); everything after the
    /// warm-up is measured.
    pub fn staged(load: Load, stages: Vec<Stage>, warmup_s: f64) -> Result<Plan, String> {
        let plan = Plan {
            load,
            start_target: 0.0,
            window_from_s: warmup_s,
            window_until_s: stages.iter().map(|stage| stage.duration_s).sum(),
            stages,
        };
        if plan.window_from_s >= plan.window_until_s {
            return Err(format!(
                "the warm-up ({} s) leaves nothing of the stages ({} s) to measure",
                plan.window_from_s, plan.window_until_s
            ));
        }
        Ok(plan)
    }

    /// One of the named profiles (not breakpoint) at `level`, over
    /// `duration_s` in all.
    pub fn profile(profile: Profile, load: Load, level: f64, duration_s: f64) -> Plan {
        let d = duration_s;
        let stage = |fraction: f64, target: f64| Stage {
            duration_s: d * fraction,
            target,
        };
        match profile {
            Profile::Smoke => {
                let level = match load {
                    Load::Closed => 2.0,
                    Load::Open => 10.0,
                };
                Plan::constant(load, level, 0.0, d)
            }
            Profile::AverageLoad | Profile::Stress => {
                let level = if profile == Profile::Stress {
                    2.0 * level
                } else {
                    level
                };
                Plan {
                    load,
                    start_target: 0.0,
                    stages: vec![stage(0.2, level), stage(0.7, level), stage(0.1, 0.0)],
                    window_from_s: 0.2 * d,
                    window_until_s: 0.9 * d,
                }
            }
            Profile::Spike => {
                let base = (level / 4.0).max(1.0);
                let peak = 4.0 * level;
                Plan {
                    load,
                    start_target: base,
                    stages: vec![
                        stage(0.3, base),
                        stage(0.05, peak),
                        stage(0.2, peak),
                        stage(0.05, base),
                        stage(0.4, base),
                    ],
                    window_from_s: 0.0,
                    window_until_s: d,
                }
            }
            Profile::Breakpoint => unreachable!("breakpoint is a search, not a plan"),
        }
    }

    pub fn total_s(&self) -> f64 {
        self.stages.iter().map(|stage| stage.duration_s).sum()
    }

    pub fn window_s(&self) -> f64 {
        self.window_until_s - self.window_from_s
    }

    pub fn max_target(&self) -> f64 {
        self.stages
            .iter()
            .map(|stage| stage.target)
            .fold(self.start_target, f64::max)
    }

    /// The segments: (start s, duration s, level at start, level at end).
    fn segments(&self) -> impl Iterator<Item = (f64, f64, f64, f64)> + '_ {
        let mut at_s = 0.0;
        let mut level = self.start_target;
        self.stages.iter().map(move |stage| {
            let segment = (at_s, stage.duration_s, level, stage.target);
            at_s += stage.duration_s;
            level = stage.target;
            segment
        })
    }

    /// The level `t_s` seconds into the run (0 after the end).
    pub fn target_at(&self, t_s: f64) -> f64 {
        for (start_s, duration_s, from, to) in self.segments() {
            if t_s < start_s + duration_s {
                let progress = if duration_s > 0.0 {
                    ((t_s - start_s) / duration_s).clamp(0.0, 1.0)
                } else {
                    1.0
                };
                return from + (to - from) * progress;
            }
        }
        0.0
    }

    /// Closed loop: the first moment at or after `t_s` when virtual user
    /// `user` (0-based) is active, that is when the level exceeds `user`;
    /// `None` if never again before the end.
    pub fn next_active_s(&self, user: u32, t_s: f64) -> Option<f64> {
        let user = f64::from(user);
        for (start_s, duration_s, from, to) in self.segments() {
            let end_s = start_s + duration_s;
            if end_s <= t_s || (from <= user && to <= user) {
                continue;
            }
            let from_s = start_s.max(t_s);
            if self.target_at(from_s) > user {
                return Some(from_s);
            }
            if to <= from {
                continue;
            }
            // Rising through `user` inside this segment.
            let crossing_s = start_s + duration_s * (user - from) / (to - from);
            // Strictly above: nudge past the crossing.
            let crossing_s = crossing_s.max(from_s) + 1e-9;
            if crossing_s < end_s {
                return Some(crossing_s);
            }
        }
        None
    }

    /// Open loop: when arrivals are due, from the level's integral.
    pub fn arrivals(&self) -> Arrivals {
        let mut segments = Vec::with_capacity(self.stages.len());
        let mut count = 0.0;
        for (start_s, duration_s, from, to) in self.segments() {
            segments.push(Segment {
                start_s,
                duration_s,
                rate_from: from,
                rate_to: to,
                count_before: count,
            });
            count += duration_s * (from + to) / 2.0;
        }
        Arrivals {
            segments,
            cursor: 0,
        }
    }
}

struct Segment {
    start_s: f64,
    duration_s: f64,
    rate_from: f64,
    rate_to: f64,
    /// Arrivals due before the segment starts.
    count_before: f64,
}

/// The arrival schedule of an open-loop plan.
pub struct Arrivals {
    segments: Vec<Segment>,
    cursor: usize,
}

impl Arrivals {
    /// When arrival `n` (0-based) is due: the moment the integral of the
    /// rate reaches `n`; `None` once past the end. Calls must not go
    /// backwards in `n`.
    pub fn due_s(&mut self, n: u64) -> Option<f64> {
        let n = n as f64;
        while let Some(segment) = self.segments.get(self.cursor) {
            // Rounding can put `n` a hair before the segment's first arrival.
            let in_segment = (n - segment.count_before).max(0.0);
            let slope = if segment.duration_s > 0.0 {
                (segment.rate_to - segment.rate_from) / segment.duration_s
            } else {
                0.0
            };
            // count(τ) = rate_from·τ + slope·τ²/2; solve count(τ) = in_segment.
            let tau = if slope.abs() < 1e-12 {
                (segment.rate_from > 0.0).then(|| in_segment / segment.rate_from)
            } else {
                let discriminant = segment.rate_from * segment.rate_from + 2.0 * slope * in_segment;
                (discriminant >= 0.0).then(|| (discriminant.sqrt() - segment.rate_from) / slope)
            };
            match tau {
                Some(tau) if tau >= 0.0 && tau < segment.duration_s => {
                    return Some(segment.start_s + tau)
                }
                _ => self.cursor += 1,
            }
        }
        None
    }
}

/// The breakpoint search: an open loop whose rate rises step by step.
#[derive(Clone, Debug, PartialEq)]
pub struct Breakpoint {
    pub start_rate_per_s: f64,
    /// Each step's rate is the last one's times this.
    pub growth: f64,
    /// Unmeasured seconds at the start of each step.
    pub step_warmup_s: f64,
    pub step_s: f64,
    pub max_p99_ms: f64,
    pub max_error_pct: f64,
    /// Completed under this share of the arrivals offered: not keeping up.
    pub min_completed_share: f64,
    pub max_steps: u32,
}

/// How one breakpoint step went.
#[derive(Clone, Debug, PartialEq)]
pub struct StepResult {
    pub rate_per_s: f64,
    pub throughput_per_s: f64,
    pub p99_ms: f64,
    pub started: u64,
    pub failed: u64,
}

impl Breakpoint {
    pub fn rate_of_step(&self, step: u32) -> f64 {
        self.start_rate_per_s * self.growth.powi(step as i32)
    }

    pub fn threshold(&self) -> String {
        format!(
            "e2e p99 > {} ms, errors > {}%, or completed < {:.0}% of offered",
            self.max_p99_ms,
            self.max_error_pct,
            self.min_completed_share * 100.0
        )
    }

    /// Why a step broke the thresholds, if it did.
    pub fn broken(&self, step: &StepResult) -> Option<String> {
        if step.p99_ms > self.max_p99_ms {
            return Some(format!("e2e p99 {:.1} ms", step.p99_ms));
        }
        let error_pct = if step.started == 0 {
            0.0
        } else {
            100.0 * step.failed as f64 / step.started as f64
        };
        if error_pct > self.max_error_pct {
            return Some(format!("{error_pct:.2}% of flows failed"));
        }
        if step.throughput_per_s < self.min_completed_share * step.rate_per_s {
            return Some(format!(
                "completed {:.0}/s of {:.0}/s offered",
                step.throughput_per_s, step.rate_per_s
            ));
        }
        None
    }
}

/// Parses k6-style stages: `DURATION:TARGET,…`, e.g. `10s:64,30s:64,5s:0`
/// (durations in s, ms or m; a bare number is seconds).
pub fn parse_stages(spec: &str) -> Result<Vec<Stage>, String> {
    let mut stages = Vec::new();
    for part in spec.split(',').map(str::trim).filter(|p| !p.is_empty()) {
        let (duration, target) = part
            .split_once(':')
            .ok_or_else(|| format!("stage {part:?} is not DURATION:TARGET (e.g. 10s:64)"))?;
        let duration_s = parse_duration_s(duration.trim()).ok_or_else(|| {
            format!("stage {part:?}: {duration:?} is not a duration (10s, 500ms, 2m)")
        })?;
        let target: f64 = target
            .trim()
            .parse()
            .ok()
            .filter(|t: &f64| t.is_finite() && *t >= 0.0)
            .ok_or_else(|| format!("stage {part:?}: {target:?} is not a level ≥ 0"))?;
        stages.push(Stage { duration_s, target });
    }
    if stages.is_empty() {
        return Err("no stages given (e.g. 10s:64,30s:64,5s:0)".into());
    }
    Ok(stages)
}

fn parse_duration_s(text: &str) -> Option<f64> {
    let (number, scale) = if let Some(ms) = text.strip_suffix("ms") {
        (ms, 0.001)
    } else if let Some(s) = text.strip_suffix('s') {
        (s, 1.0)
    } else if let Some(m) = text.strip_suffix('m') {
        (m, 60.0)
    } else {
        (text, 1.0)
    };
    let value: f64 = number.trim().parse().ok()?;
    (value.is_finite() && value >= 0.0 && value * scale <= 86_400.0).then_some(value * scale)
}

impl fmt::Display for Stage {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}s:{}", self.duration_s, self.target)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn close(got: f64, want: f64) -> bool {
        (got - want).abs() < 1e-6
    }

    #[test]
    fn stages_parse_with_units_and_reject_nonsense() {
        let stages = parse_stages("10s:64, 500ms:0,1m:2.5,3:7").unwrap();
        let want = [(10.0, 64.0), (0.5, 0.0), (60.0, 2.5), (3.0, 7.0)];
        assert_eq!(stages.len(), want.len());
        for (stage, (duration_s, target)) in stages.iter().zip(want) {
            assert!(close(stage.duration_s, duration_s), "{stage:?}");
            assert!(close(stage.target, target), "{stage:?}");
        }
        for bad in ["", "10s", "10x:1", "10s:-1", "ten:1", "1s:nan", "1s:1,"] {
            if bad == "1s:1," {
                // A trailing comma is tolerated.
                assert!(parse_stages(bad).is_ok());
            } else {
                assert!(parse_stages(bad).is_err(), "{bad:?}");
            }
        }
    }

    #[test]
    fn the_level_moves_linearly_through_the_stages() {
        let plan = Plan::staged(
            Load::Closed,
            vec![
                Stage {
                    duration_s: 10.0,
                    target: 100.0,
                },
                Stage {
                    duration_s: 10.0,
                    target: 100.0,
                },
                Stage {
                    duration_s: 5.0,
                    target: 0.0,
                },
            ],
            2.0,
        )
        .unwrap();
        assert!(close(plan.target_at(0.0), 0.0));
        assert!(close(plan.target_at(5.0), 50.0));
        assert!(close(plan.target_at(15.0), 100.0));
        assert!(close(plan.target_at(22.5), 50.0));
        assert!(close(plan.target_at(30.0), 0.0));
        assert!(close(plan.total_s(), 25.0));
        assert!(close(plan.max_target(), 100.0));
        assert!(close(plan.window_s(), 23.0));
        assert!(Plan::staged(
            Load::Open,
            vec![Stage {
                duration_s: 1.0,
                target: 1.0
            }],
            1.0
        )
        .is_err());
    }

    #[test]
    fn a_virtual_user_becomes_active_when_the_level_passes_it() {
        let plan = Plan::staged(
            Load::Closed,
            vec![
                Stage {
                    duration_s: 10.0,
                    target: 10.0,
                },
                Stage {
                    duration_s: 10.0,
                    target: 0.0,
                },
            ],
            0.0,
        )
        .unwrap();
        // User 4 is active once the level is above 4: at 4 s.
        let at = plan.next_active_s(4, 0.0).unwrap();
        assert!((at - 4.0).abs() < 1e-6, "{at}");
        // Already active in the middle of the run.
        assert!(close(plan.next_active_s(4, 10.0).unwrap(), 10.0));
        // Never again once the level is falling below it.
        assert_eq!(plan.next_active_s(4, 17.0), None);
        // User 10 is never active: the level never exceeds 10.
        assert_eq!(plan.next_active_s(10, 0.0), None);
        let constant = Plan::constant(Load::Closed, 8.0, 1.0, 2.0);
        assert!(close(constant.next_active_s(7, 0.5).unwrap(), 0.5));
        assert_eq!(constant.next_active_s(8, 0.0), None);
        assert_eq!(constant.next_active_s(0, 3.0), None);
    }

    #[test]
    fn a_constant_rate_schedules_evenly() {
        let plan = Plan::constant(Load::Open, 500.0, 0.0, 2.0);
        let mut arrivals = plan.arrivals();
        assert!(close(arrivals.due_s(0).unwrap(), 0.0));
        assert!(close(arrivals.due_s(1).unwrap(), 0.002));
        assert!(close(arrivals.due_s(999).unwrap(), 1.998));
        assert_eq!(arrivals.due_s(1000), None);
    }

    #[test]
    fn a_ramp_schedules_by_the_integral_of_its_rate() {
        // 0 → 100/s over 10 s: 500 arrivals, the n-th at sqrt(n/5) s.
        let plan = Plan::staged(
            Load::Open,
            vec![
                Stage {
                    duration_s: 10.0,
                    target: 100.0,
                },
                Stage {
                    duration_s: 1.0,
                    target: 100.0,
                },
            ],
            0.0,
        )
        .unwrap();
        let mut arrivals = plan.arrivals();
        let mut last = -1.0;
        let mut count = 0;
        for n in 0.. {
            let Some(due) = arrivals.due_s(n) else { break };
            assert!(due >= last, "arrival {n} at {due} before {last}");
            if n == 125 {
                assert!((due - 5.0).abs() < 1e-6, "{due}");
            }
            last = due;
            count += 1;
        }
        // 500 in the ramp, 100 in the hold.
        assert_eq!(count, 600);
    }

    #[test]
    fn profiles_measure_what_they_should() {
        let average = Plan::profile(Profile::AverageLoad, Load::Closed, 64.0, 60.0);
        assert!(close(average.total_s(), 60.0));
        assert!(close(average.window_from_s, 12.0));
        assert!(close(average.window_until_s, 54.0));
        assert!(close(average.target_at(30.0), 64.0));
        let stress = Plan::profile(Profile::Stress, Load::Open, 1000.0, 60.0);
        assert!(close(stress.max_target(), 2000.0));
        let spike = Plan::profile(Profile::Spike, Load::Open, 1000.0, 60.0);
        assert!(close(spike.target_at(1.0), 250.0));
        assert!(close(spike.max_target(), 4000.0));
        assert!(close(spike.target_at(59.0), 250.0));
        assert!(close(spike.window_s(), 60.0));
        let smoke = Plan::profile(Profile::Smoke, Load::Closed, 64.0, 10.0);
        assert!(close(smoke.max_target(), 2.0));
    }

    #[test]
    fn the_breakpoint_names_the_threshold_it_broke() {
        let search = Breakpoint {
            start_rate_per_s: 1000.0,
            growth: 1.25,
            step_warmup_s: 1.0,
            step_s: 5.0,
            max_p99_ms: 50.0,
            max_error_pct: 1.0,
            min_completed_share: 0.9,
            max_steps: 20,
        };
        assert!(close(search.rate_of_step(2), 1562.5));
        let good = StepResult {
            rate_per_s: 1000.0,
            throughput_per_s: 995.0,
            p99_ms: 12.0,
            started: 5000,
            failed: 10,
        };
        assert_eq!(search.broken(&good), None);
        let slow = StepResult {
            p99_ms: 51.0,
            ..good.clone()
        };
        assert!(search.broken(&slow).unwrap().contains("p99"));
        let failing = StepResult {
            failed: 100,
            ..good.clone()
        };
        assert!(search.broken(&failing).unwrap().contains("failed"));
        let behind = StepResult {
            throughput_per_s: 800.0,
            ..good
        };
        assert!(search.broken(&behind).unwrap().contains("offered"));
    }
}
