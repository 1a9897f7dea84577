// hello.mjs's route with the app metrics most services have: prom-client's
// default metrics and a request counter with a label, on the app's registry,
// given to graceful-cluster with attach(server, {metricsRegistry}).
import http from 'node:http';
import process from 'node:process';
import client from 'prom-client';

const register = new client.Registry();
client.collectDefaultMetrics({register});
const requests = new client.Counter({name: 'app_requests_total', help: 'requests', labelNames: ['route', 'code'], registers: [register]});
const HELLO = Buffer.from('hello world');
const server = http.createServer((request, response) => {
	requests.inc({route: '/', code: '200'});
	response.writeHead(200, {'Content-Type': 'text/plain', 'Content-Length': HELLO.length});
	response.end(HELLO);
});
const {attach} = await import(process.env.BENCH_WORKER ?? `${process.env.BENCH_DIST ?? new URL('../../dist', import.meta.url).pathname}/src/worker/index.js`);
attach(server, {metricsRegistry: register});
server.listen(Number(process.env.PORT ?? 0), '127.0.0.1');
