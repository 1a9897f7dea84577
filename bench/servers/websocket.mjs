// The WebSocket benchmark's server (bench/websockets.js): node:http + ws, attached,
// an echo on every socket. It leaves its WebSockets open through the drain, so
// that graceful-cluster closes them when the reject phase ends: the figure is
// how long that takes. PORT = port (127.0.0.1 only).
import http from 'node:http';
import process from 'node:process';
import {WebSocketServer} from 'ws';

// bench/ has its own package.json, so 'graceful-cluster/worker' would not
// resolve to this checkout: import the build under test by path.
const {attach} = await import(process.env.BENCH_WORKER ?? `${process.env.BENCH_DIST ?? new URL('../../dist', import.meta.url).pathname}/src/worker/index.js`);

const server = http.createServer((_request, response) => {
	response.end('hello');
});
const wss = new WebSocketServer({server, perMessageDeflate: false});
wss.on('connection', socket => {
	socket.on('message', data => socket.send(data));
});
attach(server);
server.listen(Number(process.env.PORT ?? 0), '127.0.0.1', () => {
	process.stdout.write(`${JSON.stringify({msg: 'listening', port: server.address().port, pid: process.pid})}\n`);
});
