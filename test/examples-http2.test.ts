// examples/http2 under the real CLI, over TLS with a certificate made here:
// loaded over HTTP/2 and HTTP/1.1 (allowHTTP1), then drained by a SIGTERM to the
// primary with a stream in flight, as examples.test.ts does for the HTTP/1 apps.
import path from 'node:path';
import https from 'node:https';
import test from 'ava';
import got from 'got';
import {ROOT, startCluster} from './helpers/cluster.js';
import {connect, makeCertificate, MAX_STREAM_ID} from './helpers/http2.js';

const REJECT_MS = 3000;
const SLOW_MS = 4500;
const SLOW_SIZE = 100_000;
const LOAD = 30;

test.serial('HTTP/2: examples/http2/server.js serves HTTP/2 and HTTP/1.1 under load, then drains on SIGTERM without dropping the stream in flight', async t => {
	t.timeout(45_000);
	const cert = makeCertificate(t);
	const app = await startCluster(t, ['--reject-period', `${REJECT_MS}ms`, '--grace-period', '15s'], path.join(ROOT, 'examples/http2/server.js'), {
		env: {PORT: '0', TLS_KEY: cert.keyPath, TLS_CERT: cert.certPath},
	});
	const h1 = got.extend({retry: {limit: 0}, throwHttpErrors: false, https: {certificateAuthority: cert.cert}, agent: {https: new https.Agent({keepAlive: false})}});
	const base = `https://localhost:${app.port}`;

	// Load: streams on three sessions at once, and HTTP/1.1 requests.
	const sessions = [0, 1, 2].map(() => connect(t, app.port, cert.cert));
	const streams = await Promise.all(Array.from({length: LOAD}, async (_, index) => sessions[index % 3]!.request('/')));
	for (const response of streams) {
		t.is(response.status, 200);
		t.regex(response.body, /^hello from http2 over HTTP\/2\.0 \(pid \d+\)\n$/);
	}

	const old = await h1(`${base}/`);
	t.is(old.statusCode, 200);
	t.regex(old.body, /^hello from http2 over HTTP\/1\.1 \(pid \d+\)\n$/);

	const slow = sessions[0]!.request(`/slow?ms=${SLOW_MS}&size=${SLOW_SIZE}`);
	await app.waitForLog('example: slow request started');
	app.kill('SIGTERM');
	t.like(await sessions[0]!.goaway(), {code: 0, lastStreamID: MAX_STREAM_ID});
	await app.waitForLog(line => line.role === 'worker' && line.msg === 'rejecting new requests', {count: 2});

	const during = await Promise.all(Array.from({length: 10}, async () => connect(t, app.port, cert.cert).request('/')));
	for (const response of during) {
		t.is(response.status, 503);
		t.is(response.headers['retry-after'], '1');
		t.is(response.headers['connection'], undefined);
	}

	const rejected = await h1(`${base}/`);
	t.is(rejected.statusCode, 503);
	t.is(rejected.headers.connection, 'close');

	const done = await slow;
	t.is(done.status, 200);
	t.is(done.body.length, SLOW_SIZE);
	t.true(done.body.startsWith(`waited ${SLOW_MS} ms\n`));

	const exit = await app.exited;
	t.is(exit.code, 0, app.text());
	t.like(app.lines.find(line => line.role === 'primary' && line.msg === 'drain finished'), {outcome: 'clean', exitCode: 0});
	t.is(app.lines.filter(line => line.msg === 'example: shutdown hook ran').length, 2);
	t.deepEqual(app.lines.filter(line => line.level === 'error' || line.level === 'fatal'), []);
	t.notRegex(app.text(), /UnsupportedWarning/);
});
