// The deployment kit (examples/kubernetes, examples/docker, systemd/) read as
// data: the shutdown budget adds up, the probes hit the paths graceful-cluster
// answers, signals reach graceful-cluster, and the settings in each file are
// ones graceful-cluster itself accepts (parsed by its own parser, not a copy).
import {execFile, spawnSync} from 'node:child_process';
import {readFileSync, mkdtempSync, writeFileSync, rmSync} from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import {promisify} from 'node:util';
import test from 'ava';
import {parseAllDocuments} from 'yaml';
import {parseArgs} from '../src/args.js';
import {parseDuration} from '../src/duration.js';
import {ExitCode} from '../src/exit-codes.js';
import type {PrimaryOptions} from '../src/primary/options.js';
import {SETTING_FLAGS, type DrainSettings} from '../src/settings.js';
import {ROOT} from './helpers/cluster.js';

const read = (file: string): string => readFileSync(path.join(ROOT, file), 'utf8');

// An ALB keeps routing to a target it is deregistering (kubernetes-sigs/
// aws-load-balancer-controller#1064, #3270): the guide plans for up to 75 s,
// and the serve period adds 5 s of margin. A Linkerd proxy needs some seconds
// of its own drain after its wait ends (linkerd.io/2/tasks/graceful-shutdown).
const MAX_ALB_LAG_S = 75;
const ALB_LAG_MARGIN_S = 5;
const PROXY_DRAIN_S = 10;
const ALB_IDLE_TIMEOUT_DEFAULT_S = 60;

/** graceful-cluster's bin, as package.json declares it: what every entrypoint must run. */
const BIN = (JSON.parse(read('package.json')) as {bin: Record<string, string>}).bin['graceful-cluster']!;
const CLI_IN_NODE_MODULES = `node_modules/graceful-cluster/${BIN}`;

type Doc = Record<string, any>; // eslint-disable-line @typescript-eslint/no-explicit-any -- parsed YAML, read field by field

function manifests(): Doc[] {
	const docs: Doc[] = [];
	for (const file of ['namespace.yaml', 'deployment.yaml', 'service.yaml', 'ingress.yaml', 'podmonitor.yaml']) {
		for (const document of parseAllDocuments(read(`examples/kubernetes/${file}`))) {
			if (document.errors.length > 0) {
				throw new Error(`${file}: ${document.errors.map(String).join('; ')}`);
			}

			const value = document.toJS() as Doc | null;
			if (value) {
				docs.push(value);
			}
		}
	}

	return docs;
}

function one(docs: Doc[], kind: string): Doc {
	const found = docs.filter(document => document['kind'] === kind);
	if (found.length !== 1) {
		throw new Error(`expected one ${kind}, found ${found.length}`);
	}

	return found[0]!;
}

/** A duration in graceful-cluster's syntax (500ms, 20s, 2m, bare seconds), in seconds. */
function seconds(text: string | undefined, what: string): number {
	const ms = text === undefined ? undefined : parseDuration(text);
	if (ms === undefined) {
		throw new Error(`${what}: "${String(text)}" is not a duration`);
	}

	return ms / 1000;
}

/**
 * Runs graceful-cluster's own option parser on `env` alone (the test process's
 * GRACEFUL_CLUSTER_* set aside), as the CLI would at start: an unknown
 * variable, a malformed value or serve + reject >= grace throws its UsageError.
 */
function settingsFrom(env: Record<string, string>): DrainSettings {
	return optionsFrom(env).settings;
}

/** The CLI's options from `env` alone, as `settingsFrom` reads them. */
function optionsFrom(env: Record<string, string>): PrimaryOptions {
	const saved = Object.entries(process.env).filter(([key]) => key.startsWith('GRACEFUL_CLUSTER_'));
	for (const [key] of saved) {
		delete process.env[key];
	}

	Object.assign(process.env, env);
	try {
		const result = parseArgs(['--workers', '1', 'examples/hello/server.js'], ROOT);
		if (result.kind !== 'run') {
			throw new Error('expected a run');
		}

		return result.options;
	} finally {
		for (const key of Object.keys(env)) {
			delete process.env[key];
		}

		Object.assign(process.env, Object.fromEntries(saved));
	}
}

const graceful = (env: Record<string, string>) => Object.fromEntries(Object.entries(env).filter(([key]) => key.startsWith('GRACEFUL_CLUSTER_')));

test('kubernetes: the shutdown budget adds up (serve + reject + longest request <= grace <= Linkerd wait <= terminationGracePeriodSeconds)', t => {
	const docs = manifests();
	const deployment = one(docs, 'Deployment');
	const pod = deployment['spec']['template'];
	const container = pod['spec']['containers'][0] as Doc;
	const env = Object.fromEntries((container['env'] as Array<{name: string; value: string}>).map(({name, value}) => [name, String(value)]));
	const settings = settingsFrom(graceful(env));
	t.is(settings.servePeriodMs, seconds(env['GRACEFUL_CLUSTER_SERVE_PERIOD'], 'serve period') * 1000, 'the manifest\'s value is the one graceful-cluster reads');

	const serve = settings.servePeriodMs / 1000;
	const reject = settings.rejectPeriodMs / 1000;
	const grace = settings.gracePeriodMs / 1000;
	const annotations = pod['metadata']['annotations'] as Record<string, string>;
	const longestRequest = seconds(annotations['graceful-cluster/max-request-seconds'], 'graceful-cluster/max-request-seconds');
	const proxyWait = seconds(annotations['config.alpha.linkerd.io/proxy-wait-before-exit-seconds'], 'Linkerd proxy wait');
	const terminationGrace = pod['spec']['terminationGracePeriodSeconds'] as number;
	t.log(`serve ${serve} + reject ${reject} + longest request ${longestRequest} = ${serve + reject + longestRequest} <= grace ${grace} <= proxy wait ${proxyWait} <= terminationGracePeriodSeconds ${terminationGrace}`);

	t.true(serve + reject + longestRequest <= grace, 'the longest request admitted at the end of the serve period finishes before the deadline');
	t.true(grace <= proxyWait, 'graceful-cluster is done before the Linkerd proxy stops');
	t.true(proxyWait + PROXY_DRAIN_S <= terminationGrace, 'the proxy has time to drain before Kubernetes SIGKILLs the pod');
	t.is(terminationGrace, 120);
	t.is(proxyWait, 90);
	t.is(annotations['linkerd.io/inject'], 'enabled');
	t.true(serve >= MAX_ALB_LAG_S + ALB_LAG_MARGIN_S, 'new requests are served (not 503ed: an ALB does not retry a 503) while the ALB may still route to the pod');
	t.true(reject > 0);
});

test('kubernetes: probes, ALB health check and ports match what graceful-cluster serves', t => {
	const docs = manifests();
	const deployment = one(docs, 'Deployment');
	const service = one(docs, 'Service');
	const ingress = one(docs, 'Ingress');
	const namespace = one(docs, 'Namespace');
	const podSpec = deployment['spec']['template']['spec'] as Doc;
	const container = podSpec['containers'][0] as Doc;
	const env = Object.fromEntries((container['env'] as Array<{name: string; value: string}>).map(({name, value}) => [name, String(value)]));
	const settings = settingsFrom(graceful(env));

	// Probes on the paths the helper answers (the manifest's env, else the defaults).
	t.is(container['readinessProbe']['httpGet']['path'], settings.readinessPath);
	t.is(container['livenessProbe']['httpGet']['path'], settings.livenessPath);
	t.not(settings.readinessPath, settings.livenessPath, 'readiness fails during the drain, liveness must not');
	const portName = (container['ports'] as Array<{name: string; containerPort: number}>)[0]!;
	t.is(container['readinessProbe']['httpGet']['port'], portName.name);
	t.is(container['livenessProbe']['httpGet']['port'], portName.name);
	t.is(Number(env['PORT']), portName.containerPort, 'the app listens on the container port');

	// The Service and the Ingress reach that port.
	t.is(service['spec']['ports'][0]['targetPort'], portName.name);
	t.deepEqual(service['spec']['selector'], deployment['spec']['selector']['matchLabels']);
	const backend = ingress['spec']['rules'][0]['http']['paths'][0]['backend']['service'];
	t.is(backend['name'], service['metadata']['name']);
	t.is(backend['port']['name'], service['spec']['ports'][0]['name']);
	for (const document of [deployment, service, ingress]) {
		t.is(document['metadata']['namespace'], namespace['metadata']['name']);
	}

	// ALB: ip targets, readiness gate, a health check on /readyz that notices a
	// draining pod in about 20 s, a deregistration delay that covers the drain.
	const alb = ingress['metadata']['annotations'] as Record<string, string>;
	t.is(ingress['spec']['ingressClassName'], 'alb');
	t.is(alb['alb.ingress.kubernetes.io/target-type'], 'ip');
	t.is(namespace['metadata']['labels']['elbv2.k8s.aws/pod-readiness-gate-inject'], 'enabled');
	t.is(alb['alb.ingress.kubernetes.io/healthcheck-path'], settings.readinessPath);
	const interval = Number(alb['alb.ingress.kubernetes.io/healthcheck-interval-seconds']);
	const timeout = Number(alb['alb.ingress.kubernetes.io/healthcheck-timeout-seconds']);
	const unhealthy = Number(alb['alb.ingress.kubernetes.io/unhealthy-threshold-count']);
	t.true(timeout < interval, 'an ALB health check times out before the next one');
	const detection = interval * unhealthy;
	t.true(detection >= 15 && detection <= 25, `a failing pod is detected in ${detection} s, about 20 s`);
	const attributes = Object.fromEntries(alb['alb.ingress.kubernetes.io/target-group-attributes']!.split(',').map(pair => pair.trim().split('=') as [string, string]));
	const deregistration = Number(attributes['deregistration_delay.timeout_seconds']);
	t.true(deregistration >= settings.gracePeriodMs / 1000, `deregistration delay ${deregistration} s covers the grace period`);
	const lbAttributes = Object.fromEntries((alb['alb.ingress.kubernetes.io/load-balancer-attributes'] ?? '').split(',').filter(Boolean).map(pair => pair.trim().split('=') as [string, string]));
	const idle = Number(lbAttributes['idle_timeout.timeout_seconds'] ?? ALB_IDLE_TIMEOUT_DEFAULT_S);
	t.true(settings.keepAliveTimeoutMs / 1000 > idle, `keep-alive timeout ${settings.keepAliveTimeoutMs / 1000} s is above the ALB's ${idle} s idle timeout`);
});

test('kubernetes: the metrics port, the scrape annotations and the PodMonitor agree with --metrics', t => {
	const docs = manifests();
	const deployment = one(docs, 'Deployment');
	const monitor = one(docs, 'PodMonitor');
	const container = deployment['spec']['template']['spec']['containers'][0] as Doc;
	const env = Object.fromEntries((container['env'] as Array<{name: string; value: string}>).map(({name, value}) => [name, String(value)]));
	const {metrics} = optionsFrom(graceful(env));
	t.truthy(metrics, 'GRACEFUL_CLUSTER_METRICS is set');
	t.is(metrics?.host, undefined, 'a bare port: Prometheus scrapes the pod IP, not 127.0.0.1');
	const port = (container['ports'] as Array<{name: string; containerPort: number}>).find(({name}) => name === 'metrics');
	t.is(port?.containerPort, metrics?.port, 'the container port named metrics is --metrics');
	const annotations = deployment['spec']['template']['metadata']['annotations'] as Record<string, string>;
	t.is(annotations['prometheus.io/scrape'], 'true');
	t.is(Number(annotations['prometheus.io/port']), metrics?.port ?? Number.NaN);
	t.is(annotations['prometheus.io/path'], '/metrics');
	t.is(monitor['metadata']['namespace'], deployment['metadata']['namespace']);
	t.deepEqual(monitor['spec']['selector']['matchLabels'], deployment['spec']['selector']['matchLabels']);
	const endpoint = monitor['spec']['podMetricsEndpoints'][0] as Doc;
	t.is(endpoint['port'], 'metrics');
	t.is(endpoint['path'], '/metrics');
	t.true(seconds(endpoint['scrapeTimeout'], 'scrapeTimeout') < seconds(endpoint['interval'], 'interval'));
});

test('kubernetes: tini as PID 1 in front of graceful-cluster, exec form, with room to roll', t => {
	const docs = manifests();
	const deployment = one(docs, 'Deployment');
	const podSpec = deployment['spec']['template']['spec'] as Doc;
	const container = podSpec['containers'][0] as Doc;
	const command = container['command'] as unknown;
	t.true(Array.isArray(command), 'command is a list (exec form)');
	const argv = [...command as string[], ...(container['args'] as string[] ?? [])];
	t.deepEqual(argv.slice(0, 3), ['/usr/bin/tini', '--', 'node'], 'tini as PID 1, then node, no shell or npm between the kubelet\'s SIGTERM and graceful-cluster');
	t.true(argv[3]!.endsWith(CLI_IN_NODE_MODULES), `runs graceful-cluster's bin (${BIN})`);
	t.is(deployment['spec']['strategy']['rollingUpdate']['maxUnavailable'], 0);
	t.true(Number(deployment['spec']['strategy']['rollingUpdate']['maxSurge']) >= 1);
	t.truthy(container['resources']['limits']['cpu'], 'a CPU limit: graceful-cluster sizes its workers from it');
	// Service links put GRACEFUL_CLUSTER_SERVICE_HOST & co. in the env of any pod
	// in a namespace with a Service named graceful-cluster: they are not options,
	// while a misspelt option still is an error.
	t.is(podSpec['enableServiceLinks'], false);
	t.notThrows(() => settingsFrom({GRACEFUL_CLUSTER_SERVICE_HOST: '10.0.0.1', GRACEFUL_CLUSTER_PORT_80_TCP: 'tcp://10.0.0.1:80'}));
	t.throws(() => settingsFrom({GRACEFUL_CLUSTER_REJECT_PERIODS: '5s'}), {message: /Unknown environment variable/});
});

/** Dockerfile instructions, continuation lines joined, comments dropped. */
function dockerfile(text: string): Array<{instruction: string; value: string}> {
	const joined = text.split('\n').filter(line => !line.trimStart().startsWith('#')).join('\n').replaceAll(/\\\n/g, ' ');
	return joined.split('\n').map(line => line.trim()).filter(Boolean).map(line => {
		const [instruction, ...rest] = line.split(/\s+/);
		return {instruction: instruction!.toUpperCase(), value: rest.join(' ')};
	});
}

test('docker: exec-form ENTRYPOINT running graceful-cluster behind tini, STOPSIGNAL SIGTERM, not root', t => {
	const instructions = dockerfile(read('examples/docker/Dockerfile'));
	const last = (name: string) => instructions.filter(({instruction}) => instruction === name).at(-1)?.value;

	const entrypoint = last('ENTRYPOINT');
	t.truthy(entrypoint);
	const argv = JSON.parse(entrypoint!) as unknown;
	t.true(Array.isArray(argv), 'ENTRYPOINT is a JSON array (exec form), so no shell becomes PID 1');
	const entry = argv as string[];
	t.deepEqual(entry.slice(0, 3), ['/usr/bin/tini', '--', 'node'], 'tini as PID 1: a SIGTERM in Node\'s first milliseconds is not dropped');
	t.true(instructions.some(({instruction, value}) => instruction === 'RUN' && /apt-get install .*\btini\b/.test(value)), 'tini is installed in the image');
	t.true(entry.some(arg => arg.endsWith(CLI_IN_NODE_MODULES)), `runs graceful-cluster's bin (${BIN})`);
	t.true(Array.isArray(JSON.parse(last('CMD')!)), 'CMD is exec form too: it becomes the entrypoint\'s arguments');

	t.is(last('STOPSIGNAL'), 'SIGTERM');
	const user = last('USER');
	t.truthy(user, 'a USER is set');
	t.false(['root', '0', '0:0', 'root:root'].includes(user!), `USER ${user} is not root`);
	t.true(instructions.findIndex(({instruction}) => instruction === 'USER') > instructions.findLastIndex(({instruction}) => instruction === 'FROM'), 'USER applies to the final stage');
});

/** systemd unit file: section -> key -> values (keys may repeat), plus whether each setting has a comment above it. */
function unitFile(text: string): {sections: Map<string, Map<string, string[]>>; uncommented: string[]} {
	const sections = new Map<string, Map<string, string[]>>();
	const uncommented: string[] = [];
	let section: Map<string, string[]> | undefined;
	let previous = '';
	for (const raw of text.split('\n')) {
		const line = raw.trim();
		if (line.startsWith('[')) {
			section = new Map();
			sections.set(line.slice(1, -1), section);
		} else if (line !== '' && !line.startsWith('#') && !line.startsWith(';')) {
			const index = line.indexOf('=');
			const key = line.slice(0, index);
			section!.set(key, [...section!.get(key) ?? [], line.slice(index + 1)]);
			if (!previous.startsWith('#')) {
				uncommented.push(line);
			}
		}

		previous = line;
	}

	return {sections, uncommented};
}

const UNIT = 'systemd/graceful-cluster.service';

test('systemd: Type=exec, KillMode=mixed, TimeoutStopSec above the grace period, reload by SIGHUP, every line commented', t => {
	const {sections, uncommented} = unitFile(read(UNIT));
	const service = sections.get('Service')!;
	const value = (key: string) => service.get(key)?.at(-1);
	t.is(value('Type'), 'exec');
	t.is(value('KillMode'), 'mixed', 'SIGTERM to graceful-cluster only; SIGKILL to all at the end');
	t.is(value('ExecReload'), '/bin/kill -HUP $MAINPID');
	t.is(value('Restart'), 'on-failure');
	t.deepEqual(uncommented, [], 'every setting has a comment line above it');

	const env = Object.fromEntries((service.get('Environment') ?? []).map(assignment => {
		const index = assignment.indexOf('=');
		return [assignment.slice(0, index), assignment.slice(index + 1)];
	}));
	const settings = settingsFrom(graceful(env));
	const stop = seconds(value('TimeoutStopSec'), 'TimeoutStopSec');
	t.true(stop > settings.gracePeriodMs / 1000, `TimeoutStopSec ${stop} s is above the grace period ${settings.gracePeriodMs / 1000} s`);

	const execStart = value('ExecStart')!.split(/\s+/);
	t.false(['/bin/sh', 'sh', '/usr/bin/npm', 'npm'].includes(execStart[0]!));
	t.true(execStart[1]!.endsWith(CLI_IN_NODE_MODULES), `runs graceful-cluster's bin (${BIN})`);
	t.true(value('RestartPreventExitStatus')!.split(/\s+/).includes(String(ExitCode.USAGE)), 'a usage error is not restarted in a loop');
});

// Tests must be declared synchronously: probe for the tool without awaiting.
const systemdAnalyze = spawnSync('systemd-analyze', ['--version']).status === 0;

(systemdAnalyze ? test : test.skip)('systemd: systemd-analyze verify accepts the unit', async t => {
	// verify checks that ExecStart's binary exists: point it at this node.
	const directory = mkdtempSync(path.join(os.tmpdir(), 'gc-unit-'));
	t.teardown(() => {
		rmSync(directory, {recursive: true, force: true});
	});
	const unit = path.join(directory, 'web.service');
	writeFileSync(unit, read(UNIT).replace('ExecStart=/usr/bin/node ', `ExecStart=${process.execPath} `));
	const result = await promisify(execFile)('systemd-analyze', ['verify', unit]).then(
		({stderr}) => ({ok: true, stderr}),
		(error: Error & {stderr?: string}) => ({ok: false, stderr: error.stderr ?? String(error)}),
	);
	t.true(result.ok, result.stderr);
	t.is(result.stderr.trim(), '', 'no warnings');
});

test('docs/guide.md names every drain flag and points to the exit codes', t => {
	const guide = read('docs/guide.md');
	for (const flag of Object.values(SETTING_FLAGS)) {
		t.true(guide.includes(`--${flag}`), `--${flag}`);
	}

	// The table itself is README's (test/unit/docs.test.ts); the guide links to it.
	t.true(guide.includes('](../README.md#exit-codes)'), 'the guide links to README\'s exit codes');
});
