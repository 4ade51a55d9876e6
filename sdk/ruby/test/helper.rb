# frozen_string_literal: true

# Shared by the Ruby adapter's tests: a real sessiond, built from this
# repository (or $SESSIOND_BIN) and started fresh in a temporary folder, and
# the Ruby Agent SDK vendored beside the repository (../shared/vendor, see
# its SOURCES.md) as the oracle of the SessionStore contract.

require 'minitest/autorun'
require 'fileutils'
require 'json'
require 'securerandom'
require 'socket'
require 'tmpdir'

HERE = __dir__
SDK_DIR = File.expand_path('..', HERE)
REPO = File.expand_path('../../..', HERE)
$LOAD_PATH.unshift(File.join(SDK_DIR, 'lib'))

require 'sessiond_store'

module TestSupport
  module_function

  # Socket paths must stay under 108 bytes: test folders live in /tmp.
  def short_tmp(prefix)
    Dir.mktmpdir(prefix, '/tmp')
  end

  def sessiond_bin
    @sessiond_bin ||= begin
      given = ENV['SESSIOND_BIN'].to_s
      if given.empty?
        out = short_tmp('sdrb-bin-')
        at_exit { FileUtils.rm_rf(out) }
        path = File.join(out, 'sessiond')
        system('go', 'build', '-o', path, './cmd/sessiond', chdir: REPO, exception: true)
        path
      else
        given
      end
    end
  end

  # The environment sessiond runs in: none of the test runner's SESSIOND_*
  # settings or CLAUDE_CONFIG_DIR.
  def daemon_env
    env = ENV.to_h.reject { |k, _| k.start_with?('SESSIOND_') || k == 'CLAUDE_CONFIG_DIR' }
    env.merge('GORACE' => ENV.fetch('GORACE', 'atexit_sleep_ms=0'))
  end

  # One sessiond, its root, state folder and socket under base.
  class Daemon
    attr_reader :base, :root, :socket, :pid

    def self.start(prefix = 'sdrb-')
      new(TestSupport.short_tmp(prefix)).tap(&:start)
    end

    def initialize(base)
      @base = base
      @root = File.join(base, 'claude')
      @state = File.join(base, 'state')
      @socket = File.join(base, 'run', 's.sock')
      @log = File.join(base, 'sessiond.log')
      @status = nil
    end

    def start
      args = [TestSupport.sessiond_bin, '--root', @root, '--state-dir', @state, '--socket', @socket,
              '--log-format', 'json', '--log-level', 'warn']
      @pid = Process.spawn(TestSupport.daemon_env, *args, %i[out err] => [@log, 'a'], unsetenv_others: true)
      @status = nil
      wait_for_socket
      self
    end

    def wait_for_socket(timeout = 30)
      deadline = Process.clock_gettime(Process::CLOCK_MONOTONIC) + timeout
      loop do
        if Process.waitpid(@pid, Process::WNOHANG)
          @status = $?
          raise "sessiond exited with #{@status.exitstatus} before serving #{@socket}:\n#{log}"
        end
        begin
          UNIXSocket.new(@socket).close
          return
        rescue SystemCallError
          raise "sessiond did not serve #{@socket} within #{timeout}s:\n#{log}" if Process.clock_gettime(Process::CLOCK_MONOTONIC) > deadline

          sleep 0.05
        end
      end
    end

    def log
      File.exist?(@log) ? File.read(@log) : ''
    end

    # SIGTERM, then the exit status (0 is a clean stop).
    def stop
      return @status.exitstatus if @status

      begin
        Process.kill('TERM', @pid)
      rescue Errno::ESRCH
        nil
      end
      waited = 0.0
      until (done = Process.waitpid(@pid, Process::WNOHANG))
        if waited > 40
          Process.kill('KILL', @pid)
          Process.waitpid(@pid)
          break
        end
        sleep 0.05
        waited += 0.05
      end
      @status = $?
      done ? @status.exitstatus : -9
    end

    def remove
      FileUtils.rm_rf(@base)
    end
  end

  VENDORED_SDK = File.expand_path('../shared/vendor/claude-agent-sdk-ruby/lib', REPO)
  FIXTURES = File.expand_path(ENV['SESSIOND_FIXTURES'] || '../shared/fixtures', REPO)

  # Loads the vendored Ruby Agent SDK ($SESSIOND_SDK_RB_LIB, else
  # ../shared/vendor/claude-agent-sdk-ruby/lib), unmodified. Its top file
  # requires the mcp gem, which Debian does not package: a stand-in is put
  # last on the load path (a real mcp wins), and it refuses every use, so a
  # test reaching MCP fails instead of passing on a fake. The store code
  # paths never use MCP.
  def load_sdk
    return if defined?(ClaudeAgentSDK::Testing)

    lib = ENV['SESSIOND_SDK_RB_LIB'].to_s.empty? ? VENDORED_SDK : ENV['SESSIOND_SDK_RB_LIB']
    unless File.file?(File.join(lib, 'claude_agent_sdk.rb'))
      raise "the vendored Ruby Agent SDK is not at #{lib}: see ../shared/vendor/SOURCES.md (or set SESSIOND_SDK_RB_LIB)"
    end

    $LOAD_PATH.unshift(lib)
    $LOAD_PATH.push(File.join(HERE, 'support', 'stand_in'))
    require 'set'
    require 'claude_agent_sdk'
    require 'claude_agent_sdk/testing/session_store_conformance'
  end

  def key(project_key, session_id, subpath = nil)
    k = { 'project_key' => project_key, 'session_id' => session_id }
    k['subpath'] = subpath if subpath
    k
  end

  def entry(text = 'hi', extra = {})
    {
      'type' => 'user',
      'uuid' => SecureRandom.uuid,
      'parentUuid' => nil,
      'timestamp' => '2025-01-01T00:00:00.000Z',
      'message' => { 'role' => 'user', 'content' => text }
    }.merge(extra)
  end

  # One daemon for the whole run, for the tests that need no fresh root.
  def shared_daemon
    @shared_daemon ||= begin
      d = Daemon.start('sdrb-shared-')
      at_exit do
        code = d.stop
        warn "the shared sessiond exited with #{code} on SIGTERM (log in #{d.base})" unless code.zero?
        d.remove if code.zero?
      end
      d
    end
  end
end
