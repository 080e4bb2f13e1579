# ndpkit on the AMD Alveo U280 (xcu280-fsvh2892-2L-e).
# Pins: UG1314 (Alveo U280 user guide) and AMD's alveo-u280-xdc master constraints;
# see README.md.  Port names are those of the generated block design wrapper.

set_property CONFIG_VOLTAGE 1.8                        [current_design]
set_property BITSTREAM.CONFIG.CONFIGFALLBACK ENABLE    [current_design]
set_property BITSTREAM.GENERAL.COMPRESS TRUE           [current_design]
set_property CONFIG_MODE SPIx4                         [current_design]
set_property BITSTREAM.CONFIG.SPI_BUSWIDTH 4           [current_design]
set_property BITSTREAM.CONFIG.CONFIGRATE 85.0          [current_design]
set_property BITSTREAM.CONFIG.SPI_32BIT_ADDR YES       [current_design]
set_property BITSTREAM.CONFIG.SPI_FALL_EDGE YES        [current_design]

# PCIe: 100 MHz reference clock MGTREFCLK0_225 (lanes 0-15 on quads 224-227), PERST#
set_property PACKAGE_PIN AR15 [get_ports pcie_refclk_clk_p]
set_property PACKAGE_PIN AR14 [get_ports pcie_refclk_clk_n]
create_clock -period 10.000 -name pcie_refclk [get_ports pcie_refclk_clk_p]
set_property -dict {PACKAGE_PIN BH26 IOSTANDARD LVCMOS18 PULLUP true} [get_ports pcie_perstn]
set_false_path -from [get_ports pcie_perstn]

# HBM reference / APB clock: 100 MHz LVDS (SYSCLK2)
set_property -dict {PACKAGE_PIN G31 IOSTANDARD LVDS} [get_ports hbm_refclk_clk_p]
set_property -dict {PACKAGE_PIN F31 IOSTANDARD LVDS} [get_ports hbm_refclk_clk_n]
create_clock -period 10.000 -name hbm_refclk [get_ports hbm_refclk_clk_p]

# HBM catastrophic-temperature output to the card's controller: must be driven low
set_property -dict {PACKAGE_PIN D32 IOSTANDARD LVCMOS18} [get_ports hbm_cattrip]
set_false_path -to [get_ports hbm_cattrip]

# the PCIe user clock and the HBM reference clock are unrelated
set_clock_groups -asynchronous -group [get_clocks -include_generated_clocks pcie_refclk] \
    -group [get_clocks -include_generated_clocks hbm_refclk]
