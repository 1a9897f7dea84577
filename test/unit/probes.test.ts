// Which URL is a probe (probes.ts `match`): the exact path or the path and a
// query, whatever the paths (turned off, `/` itself, sharing a prefix).
import test from 'ava';
import {Probes, type ProbeSettings} from '../../src/worker/probes.js';

const probes = (readinessPath: string, livenessPath: string): Probes => new Probes({readinessPath, livenessPath} satisfies ProbeSettings);

test('the default paths: the exact path or the path with a query; nothing else', t => {
	const p = probes('/readyz', '/livez');
	t.is(p.match('/readyz'), 'readiness');
	t.is(p.match('/readyz?verbose=1'), 'readiness');
	t.is(p.match('/livez'), 'liveness');
	t.is(p.match('/livez?x'), 'liveness');
	for (const url of ['/', '', '/r', '/readyzz', '/readyz/', '/ready', '/l', '/livezz', '/api/readyz', '/Readyz', '*']) {
		t.is(p.match(url), undefined, url);
	}
});

test('probe paths sharing their first characters with each other and with app paths', t => {
	const p = probes('/health/ready', '/health/live');
	t.is(p.match('/health/ready'), 'readiness');
	t.is(p.match('/health/live?full'), 'liveness');
	t.is(p.match('/health'), undefined);
	t.is(p.match('/hello'), undefined);
});

test('a probe turned off (an empty path) matches nothing, and the other still matches', t => {
	const p = probes('', '/livez');
	t.is(p.match('/livez'), 'liveness');
	t.is(p.match('/readyz'), undefined);
	t.is(p.match('/'), undefined);
	t.is(p.match(''), undefined);
	const none = probes('', '');
	for (const url of ['/', '', '/livez', '/readyz']) {
		t.is(none.match(url), undefined, url);
	}
});

test('a probe at "/" itself: "/" and "/?query" are the probe, every other path is not', t => {
	const p = probes('/', '/livez');
	t.is(p.match('/'), 'readiness');
	t.is(p.match('/?check=1'), 'readiness');
	t.is(p.match('/livez'), 'liveness');
	t.is(p.match('/x'), undefined);
	t.is(p.match('/readyz'), undefined);
});
