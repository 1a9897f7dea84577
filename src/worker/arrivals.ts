/**
 * Arrival telemetry for the drain, which the adaptive reject period
 * (primary/adaptive-reject.ts) decides on. While serving: a request count per peer
 * (a load balancer node), snapshotted every second, for each peer's rate and longest
 * silence over the window before the signal; the hot path pays one `n++` on a counter
 * kept on the connection. Peers are told apart only when something reads the rates
 * (`perPeer`): the getpeername(2) is about 8 % of a request on a new connection
 * (bench/hot-path.js). From the signal on: every app request that arrives, whatever
 * its answer, by second and by peer. Probes and health checkers (`kube-probe/`,
 * `ELB-HealthChecker/`, judged by a connection's first request: they open one per
 * check) are not counted.
 */
import type {Clock, Timer} from '../clock.js';
import {OTHER_PEERS, RATE_WINDOW_MS, type ArrivalsReport, type PeerArrivals} from '../arrivals-report.js';

export {RATE_WINDOW_MS} from '../arrivals-report.js';
/** How often the totals are kept for that window: per second, so that a peer's lulls show. */
const SNAPSHOT_EVERY_MS = 1000;
/** A peer's rate since the signal is taken over its arrivals in this long before its last one, */
const RECENT_SPAN_MS = 5000;
/** and at most this many of them. */
const RECENT_KEPT = 64;
/** The shortest span a recent rate is taken over (one arrival just after the signal). */
const RECENT_MIN_SPAN_MS = 100;
/** Peers counted one by one; the rest share one counter. A pod reached directly by many clients has too many for one peer's silence to mean anything. */
export const MAX_PEERS = 256;

const HEALTH_CHECKER = /^(?:kube-probe|ELB-HealthChecker)\//;

/** What a connection's peer address is read from: the socket (`remoteAddress` is a getpeername(2) at its first read). */
export interface PeerSocket {
	readonly remoteAddress?: string | undefined;
}

export interface PeerCounter {
	n: number;
}

/** A connection's (or HTTP/2 session's) counter, kept on it so its address and User-Agent are read on its first request only. */
export const PEER_COUNTER = Symbol('graceful-cluster.peer');
export type Counted = object & {[PEER_COUNTER]?: PeerCounter};

/** The peer's address as the load balancer's node would be named: IPv4 without the IPv6 mapping. */
export function peerName(address: string | undefined): string {
	if (address === undefined) {
		// A unix socket's peer has no address: one local peer.
		return 'local';
	}

	return address.startsWith('::ffff:') ? address.slice(7) : address;
}

export const isHealthChecker = (userAgent: string | undefined): boolean => userAgent !== undefined && HEALTH_CHECKER.test(userAgent);

interface Snapshot {
	readonly at: number;
	readonly counts: ReadonlyMap<string, number>;
}

interface AfterSignal {
	readonly startedAt: number;
	readonly rates: ReadonlyMap<string, number>;
	readonly gaps: ReadonlyMap<string, number>;
	readonly bySecond: number[];
	/** How long before the signal this process could count, up to RATE_WINDOW_MS. */
	readonly observedMs: number;
	last: {readonly at: number; readonly from: string} | undefined;
	/** Each peer's arrivals since the signal, and the times of its last RECENT_KEPT (a ring). */
	readonly peers: Map<string, {count: number; lastAt: number; readonly recent: number[]}>;
	total: number;
}

/**
 * A peer's rate over the RECENT_SPAN_MS before its last arrival. Always a figure,
 * however few arrivals: a peer down to a trickle must not be judged by its rate
 * before the signal, and few arrivals read as a low rate, the safe side.
 */
function recentRate(recent: readonly number[], lastAt: number, signalAt: number): number {
	let from = Math.max(signalAt, lastAt - RECENT_SPAN_MS);
	if (recent.length === RECENT_KEPT) {
		from = Math.max(from, Math.min(...recent));
	}

	const count = recent.filter(at => at >= from).length;
	return count / (Math.max(RECENT_MIN_SPAN_MS, lastAt - from) / 1000);
}

/**
 * Each peer's longest silence over `snapshots` (a second apart): r silent seconds
 * between two that had requests is a silence of at most r + 2 s. The seconds before
 * a peer's first request are not a lull of its own.
 */
function longestGaps(snapshots: readonly Snapshot[]): Map<string, number> {
	const gaps = new Map<string, number>();
	const runs = new Map<string, number>();
	for (let index = 1; index < snapshots.length; index++) {
		const before = snapshots[index - 1]!.counts;
		for (const [peer, total] of snapshots[index]!.counts) {
			const sent = total - (before.get(peer) ?? 0) > 0;
			const run = runs.get(peer);
			if (sent) {
				if (run !== undefined && run > 0) {
					gaps.set(peer, Math.max(gaps.get(peer) ?? 0, (run + 2) * 1000));
				}

				runs.set(peer, 0);
			} else if (run !== undefined) {
				runs.set(peer, run + 1);
			}
		}
	}

	return gaps;
}

/**
 * Peers seen before the signal and those new since can be two sets of MAX_PEERS: the
 * busiest are kept and the rest join `other`, which the primary reads as too many
 * peers to tell apart (the full period), so none is silently left out.
 */
function foldExcess(peers: PeerArrivals[]): PeerArrivals[] {
	if (peers.length <= MAX_PEERS) {
		return peers;
	}

	const sorted = [...peers].sort((a, b) => (a.peer === OTHER_PEERS ? 1 : b.peer === OTHER_PEERS ? -1 : b.ratePerSecond - a.ratePerSecond || b.count - a.count));
	const kept = sorted.slice(0, MAX_PEERS);
	let other: PeerArrivals = {peer: OTHER_PEERS, ratePerSecond: 0, count: 0, lastMs: null};
	for (const peer of sorted.slice(MAX_PEERS)) {
		other = {
			peer: OTHER_PEERS,
			ratePerSecond: other.ratePerSecond + peer.ratePerSecond,
			count: other.count + peer.count,
			lastMs: peer.lastMs === null ? other.lastMs : Math.max(peer.lastMs, other.lastMs ?? 0),
		};
	}

	return [...kept, other];
}

export interface ArrivalsOptions {
	readonly perPeer?: boolean | undefined;
}

export class Arrivals {
	private readonly counters = new Map<string, PeerCounter>();
	/** The counter every connection shares when peers are not told apart: nothing reads it, but the HTTP/1.1 filter needs a connection's first request marked. */
	private readonly unattributed: PeerCounter = {n: 0};
	readonly perPeer: boolean;
	private readonly ignored: PeerCounter = {n: 0};
	private readonly other: PeerCounter = {n: 0};
	private snapshots: Snapshot[] = [];
	private timer: Timer | undefined;
	private after: AfterSignal | undefined;
	/** Bumped on each change after the signal: the reports go out when it moved. */
	private version = 0;
	/** When the first request was counted: the rate's start in a process younger than the window. */
	private startedAt: number | undefined;

	/** When counting could begin: the process's drain was made with its first server. */
	private readonly createdAt: number;

	/** `clock`: one whose timers do not keep the process alive (clock.ts `inBackground`). */
	constructor(private readonly clock: Clock, {perPeer = true}: ArrivalsOptions = {}) {
		this.perPeer = perPeer;
		this.createdAt = clock.now();
	}

	private now(): number {
		return this.clock.now();
	}

	/** From the signal on, per app request; the serving path never reads `address` or `userAgent`. */
	arrived(address: string | undefined, userAgent: string | undefined): void {
		const {after} = this;
		if (after === undefined || isHealthChecker(userAgent)) {
			return;
		}

		const at = this.now();
		const from = peerName(address);
		const second = Math.max(0, Math.floor((at - after.startedAt) / 1000));
		while (after.bySecond.length <= second) {
			after.bySecond.push(0);
		}

		after.bySecond[second]!++;
		after.last = {at, from};
		after.total++;
		const key = this.counters.has(from) || after.peers.has(from) || after.peers.size < MAX_PEERS ? from : OTHER_PEERS;
		const peer = after.peers.get(key);
		if (peer) {
			peer.recent[peer.count % RECENT_KEPT] = at;
			peer.count++;
			peer.lastAt = at;
		} else {
			after.peers.set(key, {count: 1, lastAt: at, recent: [at]});
		}

		this.version++;
	}

	/**
	 * The signal: fixes each peer's rate over the window before it. `signalAt` is
	 * earlier than now if the drain message was read late.
	 */
	begin(signalAt = this.now()): void {
		if (this.after) {
			return;
		}

		const now = signalAt;
		this.clock.clear(this.timer);
		const current = {at: now, counts: this.totals()};
		// The window's snapshots; in a process younger than the window, from its
		// first request on, when every count was 0.
		const start: Snapshot = {at: this.startedAt ?? now, counts: new Map()};
		const kept = this.snapshots.filter(snapshot => now - snapshot.at <= RATE_WINDOW_MS + SNAPSHOT_EVERY_MS / 2);
		const window = [...(this.startedAt !== undefined && now - this.startedAt <= RATE_WINDOW_MS + SNAPSHOT_EVERY_MS / 2 ? [start] : []), ...kept, current];
		const base = window[0]!;
		const seconds = Math.max(1, (now - base.at) / 1000);
		const rates = new Map<string, number>();
		for (const [peer, total] of current.counts) {
			const count = total - (base.counts.get(peer) ?? 0);
			if (count > 0) {
				rates.set(peer, count / seconds);
			}
		}

		// A server taken during the drain was not there before the signal: 0.
		const observedMs = Math.round(Math.max(0, Math.min(RATE_WINDOW_MS, now - this.createdAt)));
		this.after = {startedAt: now, rates, gaps: longestGaps(window), bySecond: [], observedMs, last: undefined, peers: new Map(), total: 0};
		this.version++;
	}

	get changes(): number {
		return this.version;
	}

	report(): ArrivalsReport | undefined {
		const {after} = this;
		if (after === undefined) {
			return undefined;
		}

		const peers: PeerArrivals[] = [];
		const names = new Set([...after.rates.keys(), ...after.peers.keys()]);
		for (const name of names) {
			const since = after.peers.get(name);
			const gap = after.gaps.get(name);
			const recent = since === undefined ? undefined : recentRate(since.recent, since.lastAt, after.startedAt);
			peers.push({
				peer: name,
				ratePerSecond: Math.round((after.rates.get(name) ?? 0) * 1000) / 1000,
				count: since?.count ?? 0,
				lastMs: since === undefined ? null : Math.round(since.lastAt - after.startedAt),
				...(gap === undefined ? {} : {longestGapMs: gap}),
				...(recent === undefined ? {} : {recentPerSecond: Math.round(recent * 1000) / 1000}),
			});
		}

		return {
			total: after.total,
			bySecond: [...after.bySecond],
			lastMs: after.last ? Math.round(after.last.at - after.startedAt) : null,
			lastFrom: after.last?.from ?? null,
			peers: foldExcess(peers),
			observedMs: after.observedMs,
		};
	}

	stop(): void {
		this.clock.clear(this.timer);
	}

	counterFor(owner: Counted, socket: PeerSocket | undefined, userAgent: string | undefined): PeerCounter {
		if (!this.perPeer) {
			owner[PEER_COUNTER] = this.unattributed;
			return this.unattributed;
		}

		if (this.timer === undefined && this.after === undefined) {
			this.startedAt = this.now();
			this.timer = this.clock.setInterval(() => {
				this.snapshot();
			}, SNAPSHOT_EVERY_MS);
		}

		let counter: PeerCounter;
		if (isHealthChecker(userAgent)) {
			counter = this.ignored;
		} else {
			const name = peerName(socket?.remoteAddress);
			counter = this.counters.get(name) ?? (this.counters.size < MAX_PEERS ? {n: 0} : this.other);
			if (counter !== this.other) {
				this.counters.set(name, counter);
			}
		}

		owner[PEER_COUNTER] = counter;
		return counter;
	}

	private totals(): Map<string, number> {
		const totals = new Map<string, number>();
		for (const [name, counter] of this.counters) {
			totals.set(name, counter.n);
		}

		if (this.other.n > 0) {
			totals.set(OTHER_PEERS, this.other.n);
		}

		return totals;
	}

	private snapshot(): void {
		const now = this.now();
		this.snapshots.push({at: now, counts: this.totals()});
		// Keep what the window needs: the newest snapshot older than it, and those after.
		while (this.snapshots.length > 1 && now - this.snapshots[1]!.at >= RATE_WINDOW_MS) {
			this.snapshots.shift();
		}
	}
}
