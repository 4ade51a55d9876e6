# frozen_string_literal: true

# SessiondStore.default_socket picks what sessiond's layout.DefaultSocket
# picks: a table of environments, and the Go original itself (the Python
# adapter's tests/testdata/golayout prints it) on the same environments.

require_relative 'helper'
require 'open3'

class TestLayout < Minitest::Test
  def pick(env, platform: 'x86_64-linux', private: false, uid: 1000, home: '/home/u')
    SessiondStore::Layout.default_socket(env: env, uid: uid, platform: platform,
                                         home: -> { home }, private: ->(_d, _u) { private })
  end

  def test_order
    assert_equal 'rel/s.sock', pick({ 'SESSIOND_SOCKET' => 'rel/s.sock', 'XDG_RUNTIME_DIR' => '/run/user/1000' })
    assert_equal '/run/user/1000/sessiond/sessiond.sock', pick({ 'XDG_RUNTIME_DIR' => '/run/user/1000/' }, private: true)
    assert_equal '/run/user/1000/sessiond/sessiond.sock', pick({ 'XDG_RUNTIME_DIR' => 'relative' }, private: true)
    assert_equal '/h/.local/state/sessiond/run/sessiond.sock', pick({ 'HOME' => '/h' })
    assert_equal '/var/folders/x/T/sessiond/sessiond.sock',
                 pick({ 'HOME' => '/h', 'TMPDIR' => '/var/folders/x/T/' }, platform: 'arm64-darwin22')
    assert_equal '/h/.local/state/sessiond/run/sessiond.sock',
                 pick({ 'HOME' => '/h', 'TMPDIR' => "/#{'t' * 90}" }, platform: 'arm64-darwin22')
  end

  def test_state_folder_and_length
    assert_equal '/st/x/run/sessiond.sock', pick({ 'SESSIOND_STATE_DIR' => '/st//x/', 'HOME' => '/h' })
    assert_equal '/xdg/sessiond/run/sessiond.sock', pick({ 'XDG_STATE_HOME' => '/xdg', 'HOME' => '/h' })
    assert_equal '/tmp/sessiond-1000/sessiond.sock', pick({ 'SESSIOND_STATE_DIR' => 'st', 'HOME' => '/h' })
    assert_equal '/tmp/sessiond-1000/sessiond.sock', pick({ 'HOME' => 'h' })
    assert_equal '/from/passwd/.local/state/sessiond/run/sessiond.sock', pick({}, home: '/from/passwd')
    tail = '/run/sessiond.sock'
    fits = "/#{'a' * (107 - tail.length - 1)}"
    assert_equal fits + tail, pick({ 'SESSIOND_STATE_DIR' => fits })
    assert_equal '/tmp/sessiond-1000/sessiond.sock', pick({ 'SESSIOND_STATE_DIR' => "#{fits}b" })
  end

  def test_the_go_original_agrees
    dir = TestSupport.short_tmp('sdrb-golayout-')
    bin = File.join(dir, 'golayout')
    assert system('go', 'build', '-o', bin, './sdk/python/tests/testdata/golayout', chdir: REPO)
    envs = [
      { 'HOME' => '/h' },
      { 'HOME' => '/h', 'XDG_RUNTIME_DIR' => '/run/x/' },
      { 'HOME' => '/h', 'XDG_RUNTIME_DIR' => 'rel', 'XDG_STATE_HOME' => '/xdg//s' },
      { 'HOME' => '/h', 'SESSIOND_SOCKET' => 'some/where.sock' },
      { 'HOME' => '/h', 'SESSIOND_STATE_DIR' => '/st/../x/' },
      { 'HOME' => 'relative' },
      { 'HOME' => "/#{'l' * 100}" },
      { 'HOME' => '/h', 'SESSIOND_STATE_DIR' => 'relative' }
    ]
    envs.each do |env|
      go, status = Open3.capture2(env.merge('PATH' => ENV['PATH']), bin, unsetenv_others: true)
      assert status.success?
      ruby = SessiondStore::Layout.default_socket(env: env)
      assert_equal go, ruby, env.inspect
    end
  ensure
    FileUtils.rm_rf(dir) if dir
  end
end
