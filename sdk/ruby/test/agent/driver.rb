# frozen_string_literal: true

# driver.rb runs the vendored Ruby Agent SDK with the real Claude Code CLI for
# sessiond's end-to-end tests (e2e/clisdk_test.go), as
# sdk/typescript/test/agent/driver.mjs does for the TypeScript SDK. It takes
# one JSON argument and prints one JSON line per event, so the Go test decides
# what is right.
#
#   {"op": "turn", "socket", "cwd", "home", "baseURL", "cli", "prompt",
#    "resume"?, "flush"?: "batched"|"eager"}
#     On defaults: no CLAUDE_CONFIG_DIR (the Go test unsets it and sets HOME
#     for this process too), so the CLI and the store both take ~/.claude.
#     prints {"module": path} (the sessiond_store gem's folder),
#     {"appended": {subpath, entries}} for each batch the SDK mirrors, before
#     it is sent, {"msg": {type, subtype, session_id, is_error, error}} for
#     each message, then {"end": {"session_id", "error"?}}.
#   {"op": "functions", "socket", "root", "cwd", "sessionId"}
#     prints {"store": {...}, "disk": {...}}: what the SDK's list_sessions,
#     get_session_info, get_session_messages, list_subagents and
#     get_subagent_messages return with the store and reading the files
#     sessiond wrote under root.
#
# sessiond_store is the gem installed with gem install --user-install, as the
# adapter's README says (the Go test never puts sdk/ruby/lib on the load
# path). The SDK is the vendored one (-I), with the tests' stand-in for the
# mcp gem last on the load path (Debian has no mcp gem).

require 'json'
$LOAD_PATH.push(File.expand_path('../support/stand_in', __dir__))
require 'set'
require 'claude_agent_sdk'
require 'sessiond_store'

CFG = JSON.parse(ARGV.fetch(0))

def out(obj)
  $stdout.write("#{JSON.generate(obj)}\n")
  $stdout.flush
end

# Reports each batch the SDK mirrors, for the test to compare with the
# transcript, then stores it.
module ReportAppends
  def append(key, entries)
    subpath = key['subpath'] || key[:subpath] || ''
    out('appended' => { 'subpath' => subpath, 'entries' => entries })
    super
  end
end

def turn
  out('module' => File.realpath(Gem.loaded_specs.fetch('sessiond_store').full_gem_path))
  store = SessiondStore.new(socket_path: CFG['socket'])
  store.singleton_class.prepend(ReportAppends)
  env = {
    'ANTHROPIC_BASE_URL' => CFG['baseURL'],
    'ANTHROPIC_API_KEY' => 'sk-test',
    'HOME' => CFG['home'],
    'CLAUDE_CODE_TMPDIR' => CFG['home'],
    'DISABLE_TELEMETRY' => '1',
    'CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC' => '1'
  }
  session_id = CFG['resume'] || ''
  begin
    options = ClaudeAgentSDK::ClaudeAgentOptions.new(
      cwd: CFG['cwd'],
      env: env,
      cli_path: CFG['cli'],
      allowed_tools: %w[Bash Agent Task],
      session_store: store,
      session_store_flush: CFG['flush'] || 'batched',
      resume: CFG['resume']
    )
    ClaudeAgentSDK.query(prompt: CFG['prompt'], options: options) do |m|
      sid = m.respond_to?(:session_id) ? m.session_id : nil
      session_id = sid if sid && !sid.empty?
      error = m.respond_to?(:error) ? m.error : nil
      out('msg' => { 'type' => m.class.name.split('::').last,
                     'subtype' => (m.respond_to?(:subtype) ? m.subtype : nil) || '',
                     'session_id' => sid || '',
                     'is_error' => m.respond_to?(:is_error) ? !!m.is_error : false,
                     'error' => error.to_s })
    end
    out('end' => { 'session_id' => session_id })
  rescue StandardError => e
    out('end' => { 'session_id' => session_id, 'error' => "#{e.class}: #{e.message}" })
  ensure
    store.close
  end
end

def plain(v)
  case v
  when Hash then v.to_h { |k, x| [k.to_s, plain(x)] }
  when Array then v.map { |x| plain(x) }
  when String, Numeric, true, false, nil then v
  else v.instance_variables.to_h { |iv| [iv.to_s.delete_prefix('@'), plain(v.instance_variable_get(iv))] }
  end
end

def functions
  sdk = ClaudeAgentSDK
  store = SessiondStore.new(socket_path: CFG['socket'])
  sid = CFG['sessionId']
  cwd = CFG['cwd']
  s = {
    'listSessions' => sdk.list_sessions_from_store(session_store: store, directory: cwd),
    'info' => sdk.get_session_info_from_store(session_store: store, session_id: sid, directory: cwd),
    'messages' => sdk.get_session_messages_from_store(session_store: store, session_id: sid, directory: cwd),
    'subagents' => sdk.list_subagents_from_store(session_store: store, session_id: sid, directory: cwd).sort
  }
  s['subagentMessages'] = s['subagents'].to_h do |a|
    [a, sdk.get_subagent_messages_from_store(session_store: store, session_id: sid, agent_id: a, directory: cwd)]
  end
  store.close
  # The disk readers take the config dir from the environment.
  ENV['CLAUDE_CONFIG_DIR'] = CFG['root']
  d = {
    'listSessions' => sdk.list_sessions(directory: cwd),
    'info' => sdk.get_session_info(session_id: sid, directory: cwd),
    'messages' => sdk.get_session_messages(session_id: sid, directory: cwd),
    'subagents' => sdk.list_subagents(session_id: sid, directory: cwd).sort
  }
  d['subagentMessages'] = d['subagents'].to_h do |a|
    [a, sdk.get_subagent_messages(session_id: sid, agent_id: a, directory: cwd)]
  end
  out('store' => plain(s), 'disk' => plain(d))
end

CFG['op'] == 'turn' ? turn : functions
