/**
 * The cluster-scale rollout harness (issue 19, item 3): two pods, K simulated
 * load balancers in front of them (one per node), each of which stops routing
 * to the terminating pod after its own propagation delay, drawn from a seeded
 * distribution (lognormal per consumer, below). Keep-alive clients talk to the
 * load balancers; a health checker opens a new connection to pod 1's readiness
 * path every second, as the kubelet does. Pod 1 is terminated, restarted on the
 * same port, and terminated again, `terminations` times.
 *
 * The figure it measures: requests a load balancer sent to pod 1 that were
 * refused or reset (the pod had stopped listening: they arrived after the
 * reject phase ended) must be 0, while the reject phase should be as short as
 * the slowest load balancer allows (`--adaptive-reject on`).
 *
 * Why the load balancers are small Node reverse proxies here, not HAProxy (as
 * in rollout.ts), although HAProxy's `source 127.0.0.x` works without root on
 * this machine (checked): the quantity under study is *when each consumer stops
 * sending new requests to the endpoint*, and that is what the field has in
 * common. kube-proxy, ingress-nginx, Cilium and the ALB nodes all keep pooled
 * or fresh connections flowing until their own programming delay has passed,
 * then send nothing new. A proxy of our own does exactly that at the instant we
 * draw, from its own source address (an agent bound to 127.0.0.x: the pods
 * tell peers apart by remote address), with its idle keep-alive connections to
 * the removed pod closed at that instant, and every failure seen as an errno
 * at the hop where it happened, on the harness's own clock. HAProxy would add a
 * detection mechanism of its own (health checks, fall x inter) on top of the
 * injected delay, would need its runtime API to remove the server at the drawn
 * time, and would report a refused or reset request only as a termination
 * state in its log; its retries would hide the failure from every other layer.
 * Not modelled: a client whose own keep-alive connection reaches the pod
 * through kube-proxy's NAT (conntrack keeps it after the endpoint is gone);
 * its next request arrives on that open connection and is answered 503 +
 * Connection: close, like a load balancer's request before its delay.
 *
 * Like rollout.ts, it knows nothing of ava: every process and server is
 * registered on a `Cleanup` the caller runs. Shared by
 * test/rollout/lb-delays.test.ts and bench/lb-delays.js (through dist/testkit/).
 */
import {spawnSync} from 'node:child_process';
import {once} from 'node:events';
import http from 'node:http';
import type net from 'node:net';
import {performance} from 'node:perf_hooks';
import {setTimeout as sleep} from 'node:timers/promises';
import {freePorts, isListening} from './net.js';
import {parseJsonLine, waitUntil, type Line} from './proc.js';
import {Load, startProc, waitReady, type Cleanup, type Command, type Proc} from './rollout.js';

// ---------------------------------------------------------------------------
// Delays

/**
 * A seeded uniform generator in (0, 1): xorshift32 over a scrambled seed, so
 * that seeds 1, 2, 3 do not start alike. Plenty for a few hundred draws; the
 * point is that a run can be repeated exactly.
 */
export function seededRandom(seed: number): () => number {
	let state = Math.imul((seed >>> 0) ^ 0x9E_37_79_B9, 0x85_EB_CA_6B) >>> 0;
	state = (state ^ (state >>> 16)) >>> 0 || 0x1234_5678;
	return () => {
		state = (state ^ (state << 13)) >>> 0;
		state = (state ^ (state >>> 17)) >>> 0;
		state = (state ^ (state << 5)) >>> 0;
		// Never 0 (xorshift never yields 0), never 1.
		return state / 2 ** 32;
	};
}

/** A standard normal draw (Box-Muller). */
function normal(random: () => number): number {
	return Math.sqrt(-2 * Math.log(random())) * Math.cos(2 * Math.PI * random());
}

export interface DelayDistribution {
	readonly name: string;
	/** One line for the reports. */
	readonly description: string;
	/** One delay per load balancer, in ms after the signal. */
	draw(random: () => number, lbs: number): number[];
}

/** Lognormal delays: `median * e^(sigma * z)`. */
export function lognormalDelays(name: string, medianMs: number, sigma: number, description: string): DelayDistribution {
	return {
		name,
		description,
		draw: (random, lbs) => Array.from({length: lbs}, () => Math.round(medianMs * Math.exp(sigma * normal(random)))),
	};
}

/** `base`, except that the last load balancer is always `lateMs` late. */
export function withStraggler(name: string, base: DelayDistribution, lateMs: number): DelayDistribution {
	return {
		name,
		description: `${base.description}; the last load balancer always ${lateMs / 1000} s`,
		draw(random, lbs) {
			const delays = base.draw(random, lbs);
			delays[lbs - 1] = lateMs;
			return delays;
		},
	};
}

/** The same delays every time (the test's short version). */
export function fixedDelays(name: string, delaysMs: readonly number[]): DelayDistribution {
	return {
		name,
		description: `fixed ${delaysMs.map(ms => `${ms / 1000} s`).join(', ')}`,
		draw(_random, lbs) {
			if (lbs !== delaysMs.length) {
				throw new Error(`${name}: ${delaysMs.length} delays for ${lbs} load balancers`);
			}

			return [...delaysMs];
		},
	};
}

/** z of the 99th percentile. */
const Z99 = 2.326;
const small = lognormalDelays('small', 800, 0.5, 'lognormal, median 0.8 s, sigma 0.5 (p99 2.6 s)');

/**
 * A small cluster (from an endpoint change to kube-proxy's rules took 0.76 s on
 * average in a kind cluster with 3 replicas: the blog series "Kubernetes for
 * Frontend Developers", part 3, "How Does Traffic Reach My Pod?"; rounded), a
 * medium one (median 1 s, p99 5 s: both assumed), and a straggler: one consumer
 * 8 s late (an ingress controller with many Ingresses, a cloud LB node).
 */
export const DISTRIBUTIONS: Readonly<Record<'small' | 'medium' | 'straggler', DelayDistribution>> = {
	small,
	medium: lognormalDelays('medium', 1000, Math.log(5) / Z99, 'lognormal, median 1 s, p99 5 s (sigma 0.69)'),
	straggler: withStraggler('straggler', small, 8000),
};

// ---------------------------------------------------------------------------
// The load balancers

/** How a request to an upstream pod failed without an HTTP answer. */
export type FailureKind = 'refused' | 'reset' | 'hang-up' | 'truncated' | 'timeout' | 'other-error';

/**
 * The failures that mean the pod was no longer taking requests: it had stopped
 * listening (refused), or closed a connection a request was on or about to be
 * on (reset, hang-up: Node's "socket hang up", closed before any response
 * byte; truncated: closed mid-response). A request that got one of these
 * arrived after the reject phase ended.
 */
export const LATE_KINDS: ReadonlySet<FailureKind> = new Set(['refused', 'reset', 'hang-up', 'truncated']);

type Upstream =
	| {readonly status: number; readonly headers: http.IncomingHttpHeaders; readonly body: Buffer}
	| {readonly error: FailureKind; readonly detail: string};

/** What one request that a load balancer sent to pod 1 came to. */
export type Pod1Outcome = 'served' | 'rejected' | 'other-status' | FailureKind;

export interface Pod1Request {
	/** The load balancer's index. */
	readonly lb: number;
	/** performance.now() when the load balancer sent it. */
	readonly sentAt: number;
	readonly outcome: Pod1Outcome;
	readonly detail: string;
}

function failureKind(error: NodeJS.ErrnoException): FailureKind {
	if (error.code === 'ECONNREFUSED') {
		return 'refused';
	}

	// Node's message when the connection ended before any response byte.
	if (error.message === 'socket hang up') {
		return 'hang-up';
	}

	if (error.code === 'ECONNRESET' || error.code === 'EPIPE') {
		return 'reset';
	}

	return 'other-error';
}

const HOP_BY_HOP = new Set(['connection', 'keep-alive', 'proxy-connection', 'transfer-encoding', 'te', 'trailer', 'upgrade', 'content-length']);

function endToEnd(headers: http.IncomingHttpHeaders): Record<string, string | string[]> {
	const result: Record<string, string | string[]> = {};
	for (const [name, value] of Object.entries(headers)) {
		if (value !== undefined && !HOP_BY_HOP.has(name)) {
			result[name] = value;
		}
	}

	return result;
}

/** The most an upstream request may take before the load balancer gives up on it. */
const UPSTREAM_TIMEOUT_MS = 10_000;

async function forward(port: number, agent: http.Agent, request: http.IncomingMessage, body: Buffer): Promise<Upstream> {
	return new Promise(resolve => {
		let settled = false;
		const finish = (result: Upstream) => {
			if (!settled) {
				settled = true;
				resolve(result);
			}
		};

		const upstream = http.request({
			host: '127.0.0.1',
			port,
			method: request.method,
			path: request.url,
			agent,
			headers: {...endToEnd(request.headers), 'content-length': String(body.length)},
		}, response => {
			const chunks: Buffer[] = [];
			response.on('data', (chunk: Buffer) => chunks.push(chunk));
			response.on('end', () => {
				finish({status: response.statusCode!, headers: response.headers, body: Buffer.concat(chunks)});
			});
			response.on('close', () => {
				if (!response.complete) {
					finish({error: 'truncated', detail: `status ${response.statusCode}, cut after ${chunks.reduce((n, c) => n + c.length, 0)} bytes`});
				}
			});
		});
		upstream.setTimeout(UPSTREAM_TIMEOUT_MS, () => {
			finish({error: 'timeout', detail: `no answer within ${UPSTREAM_TIMEOUT_MS} ms`});
			upstream.destroy();
		});
		upstream.on('error', (error: NodeJS.ErrnoException) => {
			finish({error: failureKind(error), detail: `${error.code ?? ''} ${error.message}`.trim()});
		});
		upstream.end(body);
	});
}

function outcomeOf(result: Upstream): Pod1Outcome {
	if ('error' in result) {
		return result.error;
	}

	if (result.status === 503 && result.headers['retry-after'] !== undefined) {
		return 'rejected';
	}

	return result.status >= 200 && result.status < 300 ? 'served' : 'other-status';
}

/**
 * What a careful load balancer retries on the other pod: a drain 503 and a
 * refused connection (neither reached the app) for any method, anything else
 * that failed without an answer only for a GET (HAProxy's `retry-on
 * conn-failure empty-response 503` with `option redispatch`, Envoy's
 * `reset,connect-failure,retriable-status-codes`).
 */
function retried(outcome: Pod1Outcome, method: string | undefined): boolean {
	return outcome === 'rejected' || outcome === 'refused' || (method === 'GET' && outcome !== 'served' && outcome !== 'other-status');
}

interface Pod1Route {
	readonly agent: http.Agent;
	/** Requests sent to this pod 1 (one pod 1 process: routes are renewed when it is replaced). */
	readonly log: Pod1Request[];
	routed: boolean;
}

/**
 * One simulated node's load balancer: listens on 127.0.0.1:`port` for the
 * clients, round-robins their requests between the two pods over keep-alive
 * connections made from its own source address, and stops sending pod 1 new
 * requests when told to (`removePod1`, at its drawn delay).
 */
export class SimulatedLb {
	readonly address: string;
	private readonly server: http.Server;
	private readonly pod2Agent: http.Agent;
	private pod1: Pod1Route | undefined;
	private turn = 0;
	/** When `removePod1` ran last, performance.now(). */
	removedAt: number | undefined;

	constructor(readonly index: number, readonly port: number, private readonly pods: {readonly pod1: number; readonly pod2: number}) {
		// 127.0.0.10, .11, ...: all of 127.0.0.0/8 is loopback on Linux.
		this.address = `127.0.0.${10 + index}`;
		this.pod2Agent = new http.Agent({keepAlive: true, localAddress: this.address});
		this.server = http.createServer((request, response) => {
			this.handle(request, response).catch(() => {
				// The client went away mid-request: nothing to answer.
				response.destroy();
			});
		});
		// Longer than any pause of the closed-loop clients: no idle race on the client side.
		this.server.keepAliveTimeout = 30_000;
	}

	async listen(): Promise<void> {
		this.server.listen(this.port, '127.0.0.1');
		await once(this.server, 'listening');
	}

	/** Routes to a (new) pod 1 from now on, over fresh connections. */
	addPod1(): void {
		const agent = new http.Agent({keepAlive: true, localAddress: this.address});
		const route: Pod1Route = {agent, log: [], routed: true};
		// A connection that finishes its request after the removal is closed, not pooled.
		agent.on('free', (socket: net.Socket) => {
			if (!route.routed) {
				socket.destroy();
			}
		});
		this.pod1 = route;
		this.removedAt = undefined;
	}

	/**
	 * The endpoint is gone from this node's view: no new request goes to pod 1,
	 * and the idle connections to it are closed now (requests on the busy ones
	 * finish, then those close too).
	 */
	removePod1(): void {
		const route = this.pod1;
		if (!route?.routed) {
			return;
		}

		route.routed = false;
		this.removedAt = performance.now();
		for (const sockets of Object.values(route.agent.freeSockets)) {
			for (const socket of sockets ?? []) {
				socket.destroy();
			}
		}
	}

	/** The requests sent to the current pod 1 so far. */
	get pod1Log(): readonly Pod1Request[] {
		return this.pod1?.log ?? [];
	}

	async close(): Promise<void> {
		this.server.closeAllConnections();
		this.server.close();
		this.pod1?.agent.destroy();
		this.pod2Agent.destroy();
	}

	private async handle(request: http.IncomingMessage, response: http.ServerResponse): Promise<void> {
		const chunks: Buffer[] = [];
		for await (const chunk of request) {
			chunks.push(chunk as Buffer);
		}

		const body = Buffer.concat(chunks);
		let result: Upstream | undefined;
		const route = this.pod1;
		if (route?.routed && this.turn++ % 2 === 0) {
			const sentAt = performance.now();
			result = await forward(this.pods.pod1, route.agent, request, body);
			const outcome = outcomeOf(result);
			// Into the log of the pod 1 it was sent to, even if a new one is routed by now.
			route.log.push({lb: this.index, sentAt, outcome, detail: 'error' in result ? result.detail : `status ${result.status}`});
			if (retried(outcome, request.method)) {
				result = undefined;
			}
		}

		result ??= await forward(this.pods.pod2, this.pod2Agent, request, body);
		if ('error' in result) {
			response.writeHead(502, {'content-type': 'text/plain'}).end(`lb ${this.index}: ${result.error}`);
			return;
		}

		response.writeHead(result.status, {...endToEnd(result.headers), 'content-length': String(result.body.length)}).end(result.body);
	}
}

// ---------------------------------------------------------------------------
// The health checker

/** What the kubelet sends: its User-Agent, a new connection per probe (Go's client with keep-alive off). */
export const PROBE_USER_AGENT = 'kube-probe/1.30';

export interface ProbeRecord {
	readonly at: number;
	/** The status, or how it failed. */
	readonly outcome: number | FailureKind;
}

/** GET `path` on a new connection every `intervalMs`, from `source`, whatever the last one did. */
export class HealthChecker {
	readonly records: ProbeRecord[] = [];
	private timer: NodeJS.Timeout | undefined;

	constructor(private readonly port: number, private readonly source: string, private readonly path: string, private readonly intervalMs: number) {}

	start(): void {
		this.timer = setInterval(() => {
			this.probe();
		}, this.intervalMs);
	}

	stop(): void {
		clearInterval(this.timer);
	}

	private probe(): void {
		const at = performance.now();
		let done = false;
		const record = (outcome: ProbeRecord['outcome']) => {
			if (!done) {
				done = true;
				this.records.push({at, outcome});
			}
		};

		const request = http.get({
			host: '127.0.0.1',
			port: this.port,
			path: this.path,
			localAddress: this.source,
			agent: false,
			headers: {'user-agent': PROBE_USER_AGENT, connection: 'close'},
		}, response => {
			response.resume();
			response.on('end', () => {
				record(response.statusCode!);
			});
		});
		// The kubelet's timeoutSeconds default: 1 s.
		request.setTimeout(1000, () => {
			record('timeout');
			request.destroy();
		});
		request.on('error', (error: NodeJS.ErrnoException) => {
			record(failureKind(error));
		});
	}
}

// ---------------------------------------------------------------------------
// Pods

export interface PodOptions {
	/** The CLI's path (the package's bin, dist/bundle/cli.cjs). */
	readonly cli: string;
	/** The app (test/fixtures/app.mjs). */
	readonly app: string;
	readonly cwd: string;
	readonly rejectPeriodMs: number;
	/** Adds `--adaptive-reject on`. */
	readonly adaptive: boolean;
	/** @default 2 */
	readonly workers?: number;
	/** @default 60_000 */
	readonly gracePeriodMs?: number;
}

/** The command of one graceful-cluster pod on `port`. */
export function gracefulClusterPod(options: PodOptions): (port: number) => Command {
	return port => ({
		argv: [
			process.execPath, options.cli,
			'--workers', String(options.workers ?? 2),
			'--reject-period', `${options.rejectPeriodMs}ms`,
			'--grace-period', `${options.gracePeriodMs ?? 60_000}ms`,
			...(options.adaptive ? ['--adaptive-reject', 'on'] : []),
			options.app,
		],
		env: {PORT: String(port)},
		cwd: options.cwd,
	});
}

/** True when the CLI at `cli` has `--adaptive-reject` (it says so in its --help). */
export function supportsAdaptiveReject(cli: string): boolean {
	const result = spawnSync(process.execPath, [cli, '--help'], {encoding: 'utf8'});
	return `${result.stdout}${result.stderr}`.includes('--adaptive-reject');
}

// ---------------------------------------------------------------------------
// The run

export interface LbRunOptions {
	/** The command that runs a pod on `port`. */
	readonly pod: (port: number) => Command;
	readonly distribution: DelayDistribution;
	/** The configured --reject-period: the reject duration when the pod's log does not say (before `rejectEndedMs`). */
	readonly rejectPeriodMs: number;
	readonly terminations: number;
	/** @default 4 */
	readonly lbs?: number;
	/** @default 1 */
	readonly seed?: number;
	/** Closed-loop keep-alive clients per load balancer. @default 3 */
	readonly clientsPerLb?: number;
	/** Each client's pause between requests: the load's pace (about 35 req/s per client at 25 ms). @default 25 */
	readonly thinkMs?: number;
	/** Traffic to both pods before each signal, so every load balancer has sent pod 1 requests: a period of the scenario. @default 3000 */
	readonly warmupMs?: number;
	/** @default 1000 */
	readonly probeIntervalMs?: number;
	/**
	 * The health checker's source address. By default the first load balancer's:
	 * the kubelet probes from the node's address, which is also where that
	 * node's proxied (SNAT'd) app traffic comes from, so probes must be told
	 * apart by request (path, User-Agent), not by peer.
	 */
	readonly probeSource?: string;
	/** @default '/readyz' */
	readonly probePath?: string;
	/** Longest wait for pod 1's exit after the signal; then it is killed. @default rejectPeriodMs + 20 s */
	readonly exitTimeoutMs?: number;
	readonly log?: (message: string) => void;
	/** Called after each termination (a bench's progress line). */
	readonly onTermination?: (termination: Termination) => void;
}

export interface LateArrival {
	readonly lb: number;
	/** ms after the signal the load balancer sent it. */
	readonly atMs: number;
	readonly kind: FailureKind;
	readonly detail: string;
}

export interface Termination {
	readonly index: number;
	/** Each load balancer's drawn delay, ms after the signal. */
	readonly delaysMs: readonly number[];
	readonly maxDelayMs: number;
	/** When each load balancer actually stopped routing to pod 1 (timer lateness included), ms after the signal. */
	readonly removedMs: ReadonlyArray<number | undefined>;
	/** Requests the load balancers sent to pod 1 after the signal, by outcome. */
	readonly toPod1: {readonly sent: number; readonly served: number; readonly rejected: number; readonly otherStatus: number; readonly timeouts: number};
	/** Refused, reset, hang-up or truncated requests to pod 1, before or after the signal: must be 0. */
	readonly late: number;
	/** Of `late`, the ones sent at or after the reject end (`rejectMs`); the others are a surprise of their own. */
	readonly lateAfterRejectEnd: number;
	readonly lateSamples: readonly LateArrival[];
	/** The reject phase's length: the pod's `rejectEndedMs`, else the configured period. */
	readonly rejectMs: number;
	/** The pod's `rejectEnd` ('adaptive' | 'period'), when it logs one. */
	readonly rejectEnd: string | undefined;
	/** ms after the signal the first worker logged that it stopped listening: the reject end as the harness saw it. */
	readonly rejectObservedMs: number | undefined;
	/** The pod's own figures from `drain finished`, when it logs them. */
	readonly lastArrivalMs: number | undefined;
	readonly lastArrivalFrom: string | undefined;
	readonly arrivalsBySecond: readonly number[] | undefined;
	/** The ground truth: the last request a load balancer sent pod 1 that pod 1 answered (ms after the signal), and from which address. */
	readonly truthLastArrivalMs: number | undefined;
	readonly truthLastArrivalFrom: string | undefined;
	readonly exit: {readonly code: number | null; readonly afterMs: number; readonly killed: boolean};
	/** Health checks of pod 1 between the signal and its exit, by outcome (status or failure). */
	readonly probes: Readonly<Record<string, number>>;
	/** The whole `drain finished` line of the pod's primary. */
	readonly drainFinished: Record<string, unknown> | undefined;
}

export interface LbRunResult {
	readonly distribution: string;
	readonly description: string;
	readonly lbs: number;
	readonly lbAddresses: readonly string[];
	readonly probeSource: string;
	readonly seed: number;
	readonly rejectPeriodMs: number;
	readonly terminations: readonly Termination[];
	/** What the clients of the load balancers saw over the whole run (the load balancers retry, so failures here are few). */
	readonly clients: {readonly requests: number; readonly ok: number; readonly failures: Record<string, number>};
	readonly durationMs: number;
}

const isDrainFinished = (record: Record<string, unknown>) => record['msg'] === 'drain finished' && record['role'] === 'primary';
const numberOr = (value: unknown): number | undefined => (typeof value === 'number' ? value : undefined);

/**
 * `terminations` terminations of pod 1 behind `lbs` load balancers whose
 * delays come from `distribution`. Every process and server is registered on
 * `cleanup`; the caller runs it.
 */
export async function runLbDelays(options: LbRunOptions, cleanup: Cleanup): Promise<LbRunResult> {
	const began = performance.now();
	const lbCount = options.lbs ?? 4;
	const seed = options.seed ?? 1;
	const random = seededRandom(seed);
	const log = options.log ?? (() => {});
	const exitTimeoutMs = options.exitTimeoutMs ?? options.rejectPeriodMs + 20_000;
	const [port1, port2, ...lbPorts] = await freePorts(2 + lbCount) as [number, number, ...number[]];

	let generation = 0;
	const startPod1 = () => startProc(`pod1#${generation++}`, options.pod(port1), cleanup);
	let pod1: Proc = startPod1();
	const pod2 = startProc('pod2', options.pod(port2), cleanup);
	// Readiness through the probe path only: an app request (GET /) from the
	// harness's own address would make it a peer that sent once before the
	// signal, whose quiet window (ln 1000 / its rate) outlasts any period.
	await Promise.all([waitReady(port1, '/readyz', pod1), waitReady(port2, '/readyz', pod2)]);

	const lbs = lbPorts.map((port, index) => new SimulatedLb(index, port, {pod1: port1, pod2: port2}));
	cleanup.add(async () => Promise.all(lbs.map(async lb => lb.close())));
	await Promise.all(lbs.map(async lb => lb.listen()));
	for (const lb of lbs) {
		lb.addPod1();
	}

	const probeSource = options.probeSource ?? lbs[0]!.address;
	const checker = new HealthChecker(port1, probeSource, options.probePath ?? '/readyz', options.probeIntervalMs ?? 1000);
	checker.start();
	cleanup.add(() => {
		checker.stop();
	});
	const loads = lbs.map(lb => new Load(lb.port, {clients: options.clientsPerLb ?? 3, thinkMs: options.thinkMs ?? 25, timeoutMs: 20_000}, () => began));
	for (const load of loads) {
		load.start();
	}

	log(`${options.distribution.name}: pods on ${port1} and ${port2}; ${lbCount} load balancers on ${lbPorts.join(', ')} from ${lbs.map(lb => lb.address).join(', ')}; probes from ${probeSource}`);
	const terminations: Termination[] = [];
	try {
		for (let index = 0; index < options.terminations; index++) {
			const delaysMs = options.distribution.draw(random, lbCount);
			const maxDelayMs = Math.max(...delaysMs);
			await sleep(options.warmupMs ?? 3000);

			const signalAt = pod1.signal('SIGTERM');
			const removals = lbs.map((lb, i) => setTimeout(() => {
				lb.removePod1();
			}, delaysMs[i]));
			cleanup.add(() => {
				for (const timer of removals) {
					clearTimeout(timer);
				}
			});

			const exit = await pod1.exitWithin(exitTimeoutMs);
			if (!exit) {
				log(`termination ${index + 1}: pod 1 did not exit within ${exitTimeoutMs} ms of the signal; killing it`);
				pod1.stop();
			}

			const exitAt = exit?.at ?? performance.now();
			// A late load balancer keeps sending to the dead pod until its own delay is over.
			await sleep(Math.max(0, signalAt + maxDelayMs + 300 - performance.now()));

			const termination = measure({
				index, delaysMs, maxDelayMs, signalAt, exitAt, pod: pod1, lbs, checker,
				killed: !exit, code: exit?.code ?? null, rejectPeriodMs: options.rejectPeriodMs,
			});
			terminations.push(termination);
			options.onTermination?.(termination);

			if (index + 1 < options.terminations) {
				// The replacement, on the same port once the old pod let go of it.
				await waitUntil(async () => !(await isListening(port1)), {timeout: 10_000, interval: 50, what: 'pod 1\'s port free for the replacement'});
				pod1 = startPod1();
				await waitReady(port1, '/readyz', pod1);
				for (const lb of lbs) {
					lb.addPod1();
				}
			}
		}
	} finally {
		checker.stop();
		await Promise.all(loads.map(async load => load.stop()));
	}

	let requests = 0;
	let ok = 0;
	const failures: Record<string, number> = {};
	for (const {tally} of loads) {
		requests += tally.total;
		ok += tally.get('ok');
		for (const [kind, n] of Object.entries(tally.ambiguous())) {
			failures[kind] = (failures[kind] ?? 0) + n;
		}
	}

	return {
		distribution: options.distribution.name,
		description: options.distribution.description,
		lbs: lbCount,
		lbAddresses: lbs.map(lb => lb.address),
		probeSource,
		seed,
		rejectPeriodMs: options.rejectPeriodMs,
		terminations,
		clients: {requests, ok, failures},
		durationMs: Math.round(performance.now() - began),
	};
}

interface MeasureInput {
	readonly index: number;
	readonly delaysMs: readonly number[];
	readonly maxDelayMs: number;
	readonly signalAt: number;
	readonly exitAt: number;
	readonly pod: Proc;
	readonly lbs: readonly SimulatedLb[];
	readonly checker: HealthChecker;
	readonly killed: boolean;
	readonly code: number | null;
	readonly rejectPeriodMs: number;
}

function measure(input: MeasureInput): Termination {
	const {signalAt, lbs} = input;
	const since = (at: number) => Math.round(at - signalAt);
	const records = input.pod.lines.map((line: Line) => ({line, record: parseJsonLine(line)}));
	const finished = records.find(({record}) => record && isDrainFinished(record))?.record;
	const stopped = records.find(({line, record}) => line.at >= signalAt && typeof record?.['msg'] === 'string' && record['msg'].startsWith('stopped listening'));
	const rejectEndedMs = numberOr(finished?.['rejectEndedMs']);
	const rejectMs = rejectEndedMs ?? input.rejectPeriodMs;
	const rejectObservedMs = stopped ? since(stopped.line.at) : undefined;

	const requests = lbs.flatMap(lb => lb.pod1Log);
	const after = requests.filter(request => request.sentAt >= signalAt);
	const late = requests.filter(request => LATE_KINDS.has(request.outcome as FailureKind));
	const answered = after.filter(request => request.outcome === 'served' || request.outcome === 'rejected' || request.outcome === 'other-status');
	const last = answered.reduce<Pod1Request | undefined>((latest, request) => (latest && latest.sentAt >= request.sentAt ? latest : request), undefined);
	const count = (outcome: Pod1Outcome) => after.filter(request => request.outcome === outcome).length;

	const probes: Record<string, number> = {};
	for (const probe of input.checker.records) {
		if (probe.at >= signalAt && probe.at <= input.exitAt) {
			probes[String(probe.outcome)] = (probes[String(probe.outcome)] ?? 0) + 1;
		}
	}

	const arrivals = finished?.['arrivalsBySecond'];
	return {
		index: input.index,
		delaysMs: input.delaysMs,
		maxDelayMs: input.maxDelayMs,
		removedMs: lbs.map(lb => (lb.removedAt === undefined ? undefined : since(lb.removedAt))),
		toPod1: {sent: after.length, served: count('served'), rejected: count('rejected'), otherStatus: count('other-status'), timeouts: count('timeout')},
		late: late.length,
		// The pod's own figure, else the period: the earliest the phase can end
		// (the log line that shows it comes tens of ms after the fact).
		lateAfterRejectEnd: late.filter(request => since(request.sentAt) >= rejectMs).length,
		lateSamples: late.slice(0, 10).map(request => ({lb: request.lb, atMs: since(request.sentAt), kind: request.outcome as FailureKind, detail: request.detail})),
		rejectMs,
		rejectEnd: typeof finished?.['rejectEnd'] === 'string' ? finished['rejectEnd'] : undefined,
		rejectObservedMs,
		lastArrivalMs: numberOr(finished?.['lastArrivalMs']),
		lastArrivalFrom: typeof finished?.['lastArrivalFrom'] === 'string' ? finished['lastArrivalFrom'] : undefined,
		arrivalsBySecond: Array.isArray(arrivals) ? arrivals as number[] : undefined,
		truthLastArrivalMs: last ? since(last.sentAt) : undefined,
		truthLastArrivalFrom: last ? lbs[last.lb]!.address : undefined,
		exit: {code: input.code, afterMs: since(input.exitAt), killed: input.killed},
		probes,
		drainFinished: finished,
	};
}

// ---------------------------------------------------------------------------
// Reports

/** The `p`-th percentile (nearest rank) of `values`; NaN when empty. */
export function percentile(values: readonly number[], p: number): number {
	const sorted = values.filter(v => Number.isFinite(v)).sort((a, b) => a - b);
	if (sorted.length === 0) {
		return Number.NaN;
	}

	return sorted[Math.min(sorted.length - 1, Math.max(0, Math.ceil((p / 100) * sorted.length) - 1))]!;
}

export interface LbSummary {
	readonly distribution: string;
	readonly description: string;
	readonly lbs: number;
	readonly seed: number;
	readonly rejectPeriodMs: number;
	readonly terminations: number;
	/** Refused or reset requests to pod 1, all terminations: must be 0. */
	readonly late: number;
	readonly lateAfterRejectEnd: number;
	/** Terminations with at least one. */
	readonly terminationsWithLate: number;
	/** 503 + Retry-After from pod 1 (the load balancers retried them on pod 2). */
	readonly rejected: number;
	readonly rejectMs: {readonly median: number; readonly p90: number; readonly max: number};
	readonly rejectEnds: Readonly<Record<string, number>>;
	readonly rejectObservedMedianMs: number;
	readonly maxDelayMs: {readonly median: number; readonly max: number};
	/** The pod's `lastArrivalMs` (NaN before the field exists) and the harness's ground truth. */
	readonly lastArrivalMedianMs: number;
	readonly truthLastArrivalMedianMs: number;
	/** |lastArrivalMs - truth|, where both exist. */
	readonly lastArrivalErrorMs: {readonly median: number; readonly max: number};
	/** Exit minus observed reject end: what probes and idle connections held on top. */
	readonly exitAfterRejectMedianMs: number;
	readonly killed: number;
	readonly exitCodes: Readonly<Record<string, number>>;
	readonly clients: LbRunResult['clients'];
	readonly durationMs: number;
}

export function summarize(run: LbRunResult): LbSummary {
	const {terminations: list} = run;
	const rejects = list.map(t => t.rejectMs);
	const tally = (values: readonly string[]) => values.reduce<Record<string, number>>((result, value) => ({...result, [value]: (result[value] ?? 0) + 1}), {});
	const errors = list.flatMap(t => (t.lastArrivalMs === undefined || t.truthLastArrivalMs === undefined ? [] : [Math.abs(t.lastArrivalMs - t.truthLastArrivalMs)]));
	return {
		distribution: run.distribution,
		description: run.description,
		lbs: run.lbs,
		seed: run.seed,
		rejectPeriodMs: run.rejectPeriodMs,
		terminations: list.length,
		late: list.reduce((n, t) => n + t.late, 0),
		lateAfterRejectEnd: list.reduce((n, t) => n + t.lateAfterRejectEnd, 0),
		terminationsWithLate: list.filter(t => t.late > 0).length,
		rejected: list.reduce((n, t) => n + t.toPod1.rejected, 0),
		rejectMs: {median: percentile(rejects, 50), p90: percentile(rejects, 90), max: percentile(rejects, 100)},
		rejectEnds: tally(list.map(t => t.rejectEnd ?? 'not logged')),
		rejectObservedMedianMs: percentile(list.flatMap(t => (t.rejectObservedMs === undefined ? [] : [t.rejectObservedMs])), 50),
		maxDelayMs: {median: percentile(list.map(t => t.maxDelayMs), 50), max: percentile(list.map(t => t.maxDelayMs), 100)},
		lastArrivalMedianMs: percentile(list.flatMap(t => (t.lastArrivalMs === undefined ? [] : [t.lastArrivalMs])), 50),
		truthLastArrivalMedianMs: percentile(list.flatMap(t => (t.truthLastArrivalMs === undefined ? [] : [t.truthLastArrivalMs])), 50),
		lastArrivalErrorMs: {median: percentile(errors, 50), max: percentile(errors, 100)},
		exitAfterRejectMedianMs: percentile(list.flatMap(t => (t.rejectObservedMs === undefined || t.exit.killed ? [] : [t.exit.afterMs - t.rejectObservedMs])), 50),
		killed: list.filter(t => t.exit.killed).length,
		exitCodes: tally(list.map(t => (t.exit.killed ? 'killed' : String(t.exit.code)))),
		clients: run.clients,
		durationMs: run.durationMs,
	};
}

const s = (ms: number | undefined) => (ms === undefined || !Number.isFinite(ms) ? 'n/a' : `${(ms / 1000).toFixed(2)} s`);

/** One line per termination, for t.log and the bench's progress. */
export function describeTermination(t: Termination): string {
	const pod = t.lastArrivalMs === undefined ? 'not logged' : `${s(t.lastArrivalMs)} from ${t.lastArrivalFrom ?? '?'}`;
	const late = t.late === 0 ? 'late 0' : `LATE ${t.late} (${t.lateAfterRejectEnd} after the reject end; ${t.lateSamples.slice(0, 3).map(l => `lb ${l.lb} at ${s(l.atMs)} ${l.kind}`).join(', ')})`;
	return [
		`#${t.index + 1}: delays ${t.delaysMs.map(ms => (ms / 1000).toFixed(2)).join('/')} s;`,
		`${late}; 503 ${t.toPod1.rejected}, served ${t.toPod1.served} of ${t.toPod1.sent} sent to pod 1 after the signal;`,
		`reject ${s(t.rejectMs)} (${t.rejectEnd ?? 'period, not logged'}; seen ${s(t.rejectObservedMs)});`,
		`last arrival: pod ${pod}, truth ${s(t.truthLastArrivalMs)} from ${t.truthLastArrivalFrom ?? '-'};`,
		`exit ${t.exit.killed ? 'killed' : `code ${t.exit.code}`} at ${s(t.exit.afterMs)}; probes ${JSON.stringify(t.probes)}`,
	].join(' ');
}
