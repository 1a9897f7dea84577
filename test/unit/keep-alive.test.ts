// --keep-alive-timeout as the helper applies it to each attached server.
import test from 'ava';
import http from 'node:http';
import {createLogger} from '../../src/logger.js';
import {DEFAULT_SETTINGS} from '../../src/settings.js';
import {ProcessDrain} from '../../src/worker/drain.js';

const silent = createLogger({role: 'worker', level: 'silent'});

test('the default keeps connections past an ALB\'s 60 s idle timeout, with headersTimeout above it', t => {
	const server = http.createServer();
	new ProcessDrain(DEFAULT_SETTINGS, silent).addServer(server);
	t.is(server.keepAliveTimeout, 65_000);
	t.true(server.headersTimeout > server.keepAliveTimeout, `headersTimeout ${server.headersTimeout}`);
	t.true(server.requestTimeout === 0 || server.requestTimeout >= server.headersTimeout, `requestTimeout ${server.requestTimeout}`);
});

test('a headersTimeout already above the keep-alive timeout is left alone', t => {
	const server = http.createServer({headersTimeout: 90_000});
	new ProcessDrain({...DEFAULT_SETTINGS, keepAliveTimeoutMs: 30_000}, silent).addServer(server);
	t.is(server.keepAliveTimeout, 30_000);
	t.is(server.headersTimeout, 90_000);
});

test('0 leaves the server\'s own values', t => {
	const server = http.createServer();
	server.keepAliveTimeout = 7000;
	const {headersTimeout} = server;
	new ProcessDrain({...DEFAULT_SETTINGS, keepAliveTimeoutMs: 0}, silent).addServer(server);
	t.is(server.keepAliveTimeout, 7000);
	t.is(server.headersTimeout, headersTimeout);
});
